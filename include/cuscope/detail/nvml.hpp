// SPDX-License-Identifier: Apache-2.0
// What NVML, the library behind nvidia-smi, says a process uses on a device. NVML is loaded at run
// time (dlopen of libnvidia-ml.so.1, which the driver installs): no link or install dependency,
// and "unavailable" where it is absent. It is loaded and initialized once per process, at the
// first query, and stays so until the process ends (connection, current()). A program linked with
// the simulated device gets the simulation's own NVML answer instead (docs/simulated-device.md,
// "NVML").
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#if defined(__unix__) || defined(__APPLE__)
#  include <dlfcn.h>
#  include <sched.h>  // sched_yield
#  include <time.h>   // nanosleep
#  include <unistd.h>
#  define CUSCOPE_DETAIL_HAS_DLOPEN 1
#else
#  define CUSCOPE_DETAIL_HAS_DLOPEN 0
#endif

#if CUSCOPE_DETAIL_HAS_DLOPEN && (defined(__GNUC__) || defined(__clang__))
// Defined by the simulated runtime (cuscope::sim), weak: null in a program that does not link the
// simulation. The NVML entry points of the simulated devices, by name; and the simulated process
// they belong to, a number that sim::reset changes (NVML is loaded again for a fresh one).
extern "C" __attribute__((weak)) void* cuscope_sim_nvml_symbol(const char* name);
extern "C" __attribute__((weak)) unsigned long long cuscope_sim_nvml_process();
#  define CUSCOPE_DETAIL_HAS_SIM_NVML 1
#else
#  define CUSCOPE_DETAIL_HAS_SIM_NVML 0
#endif

namespace cuscope::detail::nvml {

// The parts of NVML's ABI used here (nvml.h, stable since NVML 11).
using return_t = int;
using device_t = void*;
constexpr return_t success = 0;
constexpr return_t error_insufficient_size = 7;
constexpr unsigned long long value_not_available = ~0ULL;

struct process_info_v1 {  // nvmlProcessInfo_v1_t
  unsigned int pid;
  unsigned long long usedGpuMemory;
};
struct process_info_v2 {  // nvmlProcessInfo_v2_t, also what the _v3 query fills
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

/// What NVML said about one process on one device.
struct answer {
  bool available = false;  // NVML answered for the device
  bool listed = false;     // the process is in its list of compute processes
  std::size_t used_bytes = 0;
  std::string source;  // where the answer came from, or why there is none
};

// The NVML library: libnvidia-ml.so.1, or the simulated devices' NVML. Unloaded (dlclose) when
// destroyed; the connection below never destroys its own.
class library {
 public:
  library() {
#if CUSCOPE_DETAIL_HAS_SIM_NVML
    if (cuscope_sim_nvml_symbol != nullptr) {
      sim_ = cuscope_sim_nvml_symbol("nvmlInit_v2") != nullptr;
      source_ = sim_ ? "the simulated device's NVML"
                     : "unavailable: the simulated device answers no NVML queries "
                       "(sim::device_config::nvml)";
      return;
    }
#endif
#if CUSCOPE_DETAIL_HAS_DLOPEN
    handle_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      const char* why = dlerror();
      source_ = std::string("unavailable: libnvidia-ml.so.1 could not be loaded") +
                (why != nullptr ? std::string(" (") + why + ")" : std::string());
      return;
    }
    source_ = "libnvidia-ml.so.1";
#else
    source_ = "unavailable: NVML is loaded only on Linux";
#endif
  }
  library(const library&) = delete;
  library& operator=(const library&) = delete;
  ~library() {
#if CUSCOPE_DETAIL_HAS_DLOPEN
    if (handle_ != nullptr) dlclose(handle_);
#endif
  }

  bool loaded() const noexcept {
    return sim_ || handle_ != nullptr;
  }
  const std::string& source() const noexcept {
    return source_;
  }

  void* symbol(const char* name) const noexcept {
#if CUSCOPE_DETAIL_HAS_SIM_NVML
    if (sim_) return cuscope_sim_nvml_symbol(name);
#endif
#if CUSCOPE_DETAIL_HAS_DLOPEN
    if (handle_ != nullptr) return dlsym(handle_, name);
#endif
    (void)name;
    return nullptr;
  }

  template <class F>
  F function(const char* name) const noexcept {
    return reinterpret_cast<F>(symbol(name));
  }

 private:
  void* handle_ = nullptr;
  bool sim_ = false;
  std::string source_;
};

// NVML's records of a device's processes. Plain arrays of plain structures rather than
// std::vector, whose members every translation unit that includes cuscope would instantiate.
template <class Info>
class process_list {
 public:
  process_list() = default;
  process_list(const process_list&) = delete;
  process_list& operator=(const process_list&) = delete;
  ~process_list() { delete[] data_; }

  // Room for n records, zeroed; the earlier ones are dropped. Throws std::bad_alloc.
  Info* reset(unsigned int n) {
    delete[] data_;
    data_ = nullptr;
    size_ = 0;
    data_ = new Info[n]();
    size_ = n;
    return data_;
  }
  void shrink(unsigned int n) noexcept {
    if (n < size_) size_ = n;
  }
  const Info* begin() const noexcept { return data_; }
  const Info* end() const noexcept { return data_ + size_; }

 private:
  Info* data_ = nullptr;
  unsigned int size_ = 0;
};

// Fills info through query (one of the nvmlDeviceGetComputeRunningProcesses variants), growing
// the list while NVML says it is too small (processes come and go between two calls).
template <class Info, class Query>
return_t processes(Query query, device_t device, process_list<Info>& info) {
  unsigned int count = 16;
  for (int attempt = 0; attempt < 8; ++attempt) {
    Info* const data = info.reset(count);
    unsigned int n = count;
    const return_t r = query(device, &n, data);
    if (r == success) {
      info.shrink(n);
      return r;
    }
    if (r != error_insufficient_size) return r;
    count = n > count ? n + 8 : count * 2;
  }
  return error_insufficient_size;
}

// Adds what list says the process pid uses to a.
template <class Info>
void tally(const process_list<Info>& list, unsigned int pid, answer& a) {
  a.available = true;
  for (const Info& p : list) {
    if (p.pid != pid) continue;
    a.listed = true;
    // NVML does not know the figure under some drivers (WDDM): then it is reported unknown.
    if (p.usedGpuMemory != value_not_available)
      a.used_bytes += static_cast<std::size_t>(p.usedGpuMemory);
    else
      a.available = false;
  }
}

using init_fn = return_t (*)();
using error_string_fn = const char* (*)(return_t);
using by_bus_fn = return_t (*)(const char*, device_t*);
using query_v2_fn = return_t (*)(device_t, unsigned int*, process_info_v2*);
using query_v1_fn = return_t (*)(device_t, unsigned int*, process_info_v1*);

// NVML as this process uses it: the library loaded, nvmlInit_v2 called and the entry points that
// process_usage calls found, once. Never destroyed (current() keeps every one it made), so the
// library is never unloaded and NVML never shut down: see current().
struct connection {
  unsigned long long process = 0;        // the simulated process it serves; 0 for a real one
  const connection* previous = nullptr;  // the one it replaced, which a query may still use
  const library* lib = nullptr;
  bool ready = false;  // loaded and initialized, with the entry points process_usage calls
  std::string source;  // where the answers come from, or why there are none
  error_string_fn error_string = nullptr;
  by_bus_fn by_bus = nullptr;
  query_v2_fn query = nullptr;  // the _v3 or _v2 query: these list processes in MIG instances
  query_v1_fn query_v1 = nullptr;
  const char* query_name = nullptr;
};

inline std::string describe(const connection& c, const std::string& what, return_t status) {
  std::string s = "unavailable: " + what + " failed with NVML error " + std::to_string(status);
  const char* text = c.error_string != nullptr ? c.error_string(status) : nullptr;
  if (text != nullptr) s += " (" + std::string(text) + ")";
  return s;
}

// Fills c: loads (c.lib), finds the entry points, initializes. Throws std::bad_alloc only; every
// other failure is remembered in c.source.
inline void connect(connection& c) {
  c.source = c.lib->source();
  if (!c.lib->loaded()) return;
  const auto init = c.lib->function<init_fn>("nvmlInit_v2");
  c.error_string = c.lib->function<error_string_fn>("nvmlErrorString");
  c.by_bus = c.lib->function<by_bus_fn>("nvmlDeviceGetHandleByPciBusId_v2");
  if (c.by_bus == nullptr) c.by_bus = c.lib->function<by_bus_fn>("nvmlDeviceGetHandleByPciBusId");
  for (const char* name :
       {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"}) {
    if ((c.query = c.lib->function<query_v2_fn>(name)) != nullptr) {
      c.query_name = name;
      break;
    }
  }
  if (c.query == nullptr) {
    c.query_v1 = c.lib->function<query_v1_fn>("nvmlDeviceGetComputeRunningProcesses");
    if (c.query_v1 != nullptr) c.query_name = "nvmlDeviceGetComputeRunningProcesses";
  }
  if (init == nullptr || c.by_bus == nullptr) {
    c.source = "unavailable: " + c.source + " lacks nvmlInit_v2 or nvmlDeviceGetHandleByPciBusId";
    return;
  }
  if (c.query_name == nullptr) {
    c.source = "unavailable: " + c.source + " lacks nvmlDeviceGetComputeRunningProcesses";
    return;
  }
  const return_t r = init();
  if (r != success) {
    c.source = describe(c, "nvmlInit_v2", r);
    return;
  }
  c.ready = true;
}

// Loads NVML and initializes it, for current(). Throws std::bad_alloc only; every other failure
// is remembered in the connection's source.
inline const connection* connect(unsigned long long process, const connection* previous) {
  auto* c = new connection;
  try {
    c->process = process;
    c->previous = previous;
    c->lib = new library;
    connect(*c);
  } catch (...) {
    delete c->lib;
    delete c;
    throw;
  }
  return c;
}

// The process's NVML connection, made by the first query (of any thread) and kept: one dlopen and
// one nvmlInit_v2 per process, instead of a load, an initialization and a shutdown per query,
// which are the expensive part of asking NVML and wait on each other across threads
// (docs/observability.md, "What asking NVML costs, and how cuscope holds it"). The first caller
// connects while the others wait (yielding, then sleeping); after that a query reads one atomic
// pointer. A failure to load or initialize is remembered with its reason and not retried: NVML that
// appears while a process runs (a driver installed under it) is found by the next process.
//
// Never shut down, never unloaded. NVML counts initializations (nvmlShutdown only shuts down when
// the count reaches zero), so the code around cuscope may init and shut down its own use of it
// as before. An nvmlShutdown at exit (from a static destructor or atexit) could run while another
// thread is still in a query, which is a use after free inside NVML; so NVML stays initialized
// until the process ends, as it does in any process that is killed. Nor is the library unloaded: a
// dlclose after nvmlInit_v2 without nvmlShutdown was seen to break cuda-checkpoint's lock of the
// process (docs/observability.md).
//
// A program linked with the simulated device connects once per simulated process: sim::reset
// starts a fresh one, whose NVML is not initialized; the connections of earlier ones are kept.
inline const connection& current() {
  static std::atomic<const connection*> latest{nullptr};
  static std::atomic<bool> connecting{false};
  unsigned long long process = 0;
#if CUSCOPE_DETAIL_HAS_SIM_NVML
  if (cuscope_sim_nvml_symbol != nullptr)
    process = cuscope_sim_nvml_process != nullptr ? cuscope_sim_nvml_process() : 1;
#endif
  unsigned tries = 0;
  for (;;) {
    const connection* c = latest.load(std::memory_order_acquire);
    if (c != nullptr && c->process == process) return *c;
    if (!connecting.exchange(true, std::memory_order_acquire)) {
      c = latest.load(std::memory_order_acquire);
      if (c == nullptr || c->process != process) {
        try {
          c = connect(process, c);
        } catch (...) {
          connecting.store(false, std::memory_order_release);
          throw;
        }
        latest.store(c, std::memory_order_release);
      }
      connecting.store(false, std::memory_order_release);
      return *c;
    }
    // Another thread is connecting: yield for a while, then sleep, so that threads waiting for an
    // nvmlInit_v2 that takes long (or hangs, as some drivers were seen to) do not burn a CPU.
#if CUSCOPE_DETAIL_HAS_DLOPEN
    if (++tries <= 64) {
      (void)sched_yield();
    } else {
      const timespec millisecond{0, 1000000};
      (void)nanosleep(&millisecond, nullptr);
    }
#endif
  }
}

// What NVML says the process pid uses on the device with PCI bus id bus_id
// ("00000000:65:00.0"). The device's handle is looked up at each query (a lookup in NVML's table
// of devices it has attached).
inline answer process_usage(const std::string& bus_id, unsigned int pid) {
  answer a;
  const connection& nv = current();
  a.source = nv.source;
  if (!nv.ready) return a;
  device_t device = nullptr;
  return_t r = nv.by_bus(bus_id.c_str(), &device);
  if (r != success) {
    a.source = describe(nv, "nvmlDeviceGetHandleByPciBusId(" + bus_id + ")", r);
    return a;
  }
  if (nv.query != nullptr) {
    process_list<process_info_v2> list;
    r = processes(nv.query, device, list);
    if (r == success) tally(list, pid, a);
  } else {
    process_list<process_info_v1> list;
    r = processes(nv.query_v1, device, list);
    if (r == success) tally(list, pid, a);
  }
  if (r != success) a.source = describe(nv, nv.query_name, r);
  return a;
}

// A device's PCI address as NVML's nvmlDeviceGetHandleByPciBusId takes it ("00000000:65:00.0").
inline std::string bus_id(unsigned domain, unsigned bus, unsigned device) {
  char id[32];
  std::snprintf(id, sizeof id, "%08x:%02x:%02x.0", domain, bus, device);
  return id;
}

// This process's id, as NVML lists it (in a container with its own PID namespace NVML may list
// the host's id instead, and the process is then not found).
inline unsigned int this_process() noexcept {
#if CUSCOPE_DETAIL_HAS_DLOPEN
  return static_cast<unsigned int>(getpid());
#else
  return 0;
#endif
}

}  // namespace cuscope::detail::nvml
