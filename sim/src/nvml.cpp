// SPDX-License-Identifier: Apache-2.0
// NVML, as nvidia-smi asks it, for the simulated devices: this process uses what the device has
// taken (context, cudaMalloc, pool reserve, graph memory), and another process what
// sim::set_other_process_bytes gave it. cuscope's NVML
// loader (include/cuscope/detail/nvml.hpp) finds these through cuscope_sim_nvml_symbol before it
// would load libnvidia-ml.so.1, whose answer would describe real devices. docs/simulated-device.md,
// "NVML".
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iterator>
#include <mutex>

#include "internal.hpp"

namespace cuscope::sim::detail {
namespace {

// NVML's return codes (nvml.h).
constexpr int nvml_success = 0;
constexpr int nvml_uninitialized = 1;
constexpr int nvml_invalid_argument = 2;
constexpr int nvml_no_permission = 4;
constexpr int nvml_not_found = 6;
constexpr int nvml_insufficient_size = 7;
constexpr int nvml_driver_not_loaded = 9;

struct process_info {  // nvmlProcessInfo_t (v2 and v3 queries)
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

constexpr unsigned int no_instance = 0xFFFFFFFFu;

// The simulated NVML functions, in the order of state::nvml_calls.
enum nvml_function : std::size_t { init, shutdown, by_bus_id, processes, error_string };
constexpr const char* nvml_names[] = {"nvmlInit_v2", "nvmlShutdown",
                                      "nvmlDeviceGetHandleByPciBusId_v2",
                                      "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlErrorString"};
static_assert(std::size(nvml_names) == sizeof(state::nvml_calls) / sizeof(std::size_t));

// A device handle is its index plus one, so that none is null.
int index_of(void* device) {
  return static_cast<int>(reinterpret_cast<std::uintptr_t>(device)) - 1;
}

// nvmlInit_v2 counts its calls not yet matched by nvmlShutdown, as NVML does ("a reference count of
// the number of initializations is maintained"); a reset starts a process in which NVML is not
// initialized.
int nvml_init() {
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  ++g.nvml_calls[init];
  if (g.config.nvml_init_error != nvml_success) return g.config.nvml_init_error;
  ++g.nvml_initialized;
  return nvml_success;
}

int nvml_shutdown() {
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  ++g.nvml_calls[shutdown];
  if (g.nvml_initialized == 0) return nvml_uninitialized;
  --g.nvml_initialized;
  return nvml_success;
}

// Bus ids as cudaDeviceProp gives them for the simulated devices: domain 0, bus = device index,
// device 0 ("00000000:01:00.0" is device 1).
int nvml_by_bus_id(const char* bus_id, void** device) {
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  ++g.nvml_calls[by_bus_id];
  if (bus_id == nullptr || device == nullptr) return nvml_invalid_argument;
  if (g.nvml_initialized == 0) return nvml_uninitialized;
  unsigned domain = 0;
  unsigned bus = 0;
  unsigned dev = 0;
  unsigned function = 0;
  char end = 0;
  if (std::sscanf(bus_id, "%x:%x:%x.%x%c", &domain, &bus, &dev, &function, &end) != 4)
    return nvml_invalid_argument;
  if (domain != 0 || dev != 0 || function != 0 || find_device(g, static_cast<int>(bus)) == nullptr)
    return nvml_not_found;
  *device = reinterpret_cast<void*>(static_cast<std::uintptr_t>(bus) + 1);
  return nvml_success;
}

int nvml_processes(void* device, unsigned int* count, process_info* infos) {
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  ++g.nvml_calls[processes];
  if (count == nullptr) return nvml_invalid_argument;
  if (g.nvml_initialized == 0) return nvml_uninitialized;
  device_state* d = find_device(g, index_of(device));
  if (d == nullptr) return nvml_invalid_argument;
  const std::size_t free_bytes = device_free_bytes(g, *d);
  const std::size_t used = g.config.total_bytes - free_bytes - d->other_process_bytes;
  const unsigned int listed = d->other_process_bytes != 0 ? 2 : 1;
  if (*count < listed) {
    *count = listed;
    return nvml_insufficient_size;
  }
  if (infos == nullptr) return nvml_invalid_argument;
  *count = listed;
  const auto pid = static_cast<unsigned int>(getpid());
  infos[0] = process_info{pid, used, no_instance, no_instance};
  // The co-tenant of set_other_process_bytes, under an id that is not this process's.
  if (listed == 2)
    infos[1] = process_info{pid + 1, d->other_process_bytes, no_instance, no_instance};
  return nvml_success;
}

const char* nvml_error_string(int result) {
  {
    state& g = global();
    std::lock_guard<std::recursive_mutex> lock(g.mutex);
    ++g.nvml_calls[error_string];
  }
  switch (result) {
    case nvml_success:
      return "Success";
    case nvml_uninitialized:
      return "Uninitialized";
    case nvml_invalid_argument:
      return "Invalid Argument";
    case nvml_no_permission:
      return "Insufficient Permissions";
    case nvml_not_found:
      return "Not Found";
    case nvml_insufficient_size:
      return "Insufficient Size";
    case nvml_driver_not_loaded:
      return "Driver Not Loaded";
    default:
      return "Unknown Error";
  }
}

}  // namespace

std::size_t* nvml_call_counter(state& g, const char* name) {
  for (std::size_t i = 0; i < std::size(nvml_names); ++i)
    if (std::strcmp(nvml_names[i], name) == 0) return &g.nvml_calls[i];
  return nullptr;
}

}  // namespace cuscope::sim::detail

extern "C" unsigned long long cuscope_sim_nvml_process() {
  using namespace cuscope::sim::detail;
  state& g = global();
  std::lock_guard<std::recursive_mutex> lock(g.mutex);
  return g.generation;
}

extern "C" void* cuscope_sim_nvml_symbol(const char* name) {
  using namespace cuscope::sim::detail;
  if (name == nullptr) return nullptr;
  {
    state& g = global();
    std::lock_guard<std::recursive_mutex> lock(g.mutex);
    if (!g.config.nvml) return nullptr;
  }
  struct entry {
    const char* name;
    void* fn;
  };
  const entry table[] = {
      {"nvmlInit_v2", reinterpret_cast<void*>(&nvml_init)},
      {"nvmlShutdown", reinterpret_cast<void*>(&nvml_shutdown)},
      {"nvmlDeviceGetHandleByPciBusId_v2", reinterpret_cast<void*>(&nvml_by_bus_id)},
      {"nvmlDeviceGetComputeRunningProcesses_v3", reinterpret_cast<void*>(&nvml_processes)},
      {"nvmlErrorString", reinterpret_cast<void*>(&nvml_error_string)},
  };
  for (const entry& e : table)
    if (std::strcmp(e.name, name) == 0) return e.fn;
  return nullptr;
}
