// SPDX-License-Identifier: Apache-2.0
// What NVML, the library behind nvidia-smi, says a process uses on a device. NVML is loaded at run
// time (dlopen of libnvidia-ml.so.1, which the driver installs): no link or install dependency,
// and "unavailable" where it is absent. A program linked with the simulated device gets the
// simulation's own NVML answer instead (docs/simulated-device.md, "NVML").
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#if defined(__unix__) || defined(__APPLE__)
#  include <dlfcn.h>
#  include <unistd.h>
#  define CUSCOPE_DETAIL_HAS_DLOPEN 1
#else
#  define CUSCOPE_DETAIL_HAS_DLOPEN 0
#endif

#if CUSCOPE_DETAIL_HAS_DLOPEN && (defined(__GNUC__) || defined(__clang__))
// Defined by the simulated runtime (cuscope::sim): the NVML entry points of the simulated
// devices, by name. Weak: null in a program that does not link the simulation.
extern "C" __attribute__((weak)) void* cuscope_sim_nvml_symbol(const char* name);
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

inline std::string describe(const library& lib, const char* what, return_t status) {
  using error_string_fn = const char* (*)(return_t);
  const auto text = lib.function<error_string_fn>("nvmlErrorString");
  std::string s =
      "unavailable: " + std::string(what) + " failed with NVML error " + std::to_string(status);
  if (text != nullptr && text(status) != nullptr) s += " (" + std::string(text(status)) + ")";
  return s;
}

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

// What NVML says the process pid uses on the device with PCI bus id bus_id
// ("00000000:65:00.0").
inline answer process_usage(const std::string& bus_id, unsigned int pid) {
  answer a;
  const library lib;
  a.source = lib.source();
  if (!lib.loaded()) return a;
  using init_fn = return_t (*)();
  using shutdown_fn = return_t (*)();
  using by_bus_fn = return_t (*)(const char*, device_t*);
  using query_v2_fn = return_t (*)(device_t, unsigned int*, process_info_v2*);
  using query_v1_fn = return_t (*)(device_t, unsigned int*, process_info_v1*);
  const auto init = lib.function<init_fn>("nvmlInit_v2");
  const auto shutdown = lib.function<shutdown_fn>("nvmlShutdown");
  auto by_bus = lib.function<by_bus_fn>("nvmlDeviceGetHandleByPciBusId_v2");
  if (by_bus == nullptr) by_bus = lib.function<by_bus_fn>("nvmlDeviceGetHandleByPciBusId");
  if (init == nullptr || shutdown == nullptr || by_bus == nullptr) {
    a.source = "unavailable: " + a.source + " lacks nvmlInit_v2 or nvmlDeviceGetHandleByPciBusId";
    return a;
  }
  return_t r = init();
  if (r != success) {
    a.source = describe(lib, "nvmlInit_v2", r);
    return a;
  }
  device_t device = nullptr;
  r = by_bus(bus_id.c_str(), &device);
  if (r != success) {
    a.source = describe(lib, ("nvmlDeviceGetHandleByPciBusId(" + bus_id + ")").c_str(), r);
    (void)shutdown();
    return a;
  }
  // The newest query first: the older ones do not list processes in MIG instances.
  process_list<process_info_v2> list;
  process_list<process_info_v1> list_v1;
  bool v1 = false;
  r = -1;
  const char* used_query = nullptr;
  for (const char* name :
       {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"}) {
    if (const auto q = lib.function<query_v2_fn>(name)) {
      r = processes(q, device, list);
      used_query = name;
      break;
    }
  }
  if (used_query == nullptr) {
    if (const auto q = lib.function<query_v1_fn>("nvmlDeviceGetComputeRunningProcesses")) {
      r = processes(q, device, list_v1);
      v1 = true;
      used_query = "nvmlDeviceGetComputeRunningProcesses";
    }
  }
  if (used_query == nullptr) {
    a.source = "unavailable: " + a.source + " lacks nvmlDeviceGetComputeRunningProcesses";
  } else if (r != success) {
    a.source = describe(lib, used_query, r);
  } else if (v1) {
    tally(list_v1, pid, a);
  } else {
    tally(list, pid, a);
  }
  (void)shutdown();
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
