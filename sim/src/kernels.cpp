// SPDX-License-Identifier: Apache-2.0
// nvcc's entry points and kernel launches: the registration functions that nvcc's generated code
// calls before main (bookkeeping only), the call configuration that <<<...>>> pushes and pops, the
// launch functions, function attributes, and the host stand-ins of <cuscope/sim_kernels.hpp>.
// docs/simulated-device.md, "Kernels and nvcc's entry points".
#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuscope/sim_kernels.hpp"
#include "internal.hpp"

namespace cuscope::sim::detail {
namespace {

struct function_attributes {
  int max_dynamic_shared_bytes = 0;
  int preferred_carveout = -1;
};

struct registered_function {
  void** module = nullptr;
  std::string mangled;
  std::string name;  // demangled
  function_attributes attributes;
};

struct registered_variable {
  void** module = nullptr;
  std::string name;
  std::size_t size = 0;
  void** managed_slot = nullptr;  // __managed__: where the host code reads the variable's address
  void* managed_memory = nullptr;
};

// What nvcc's generated code registered: a property of the program's image, not of the simulated
// process, so sim::reset keeps it. Never destroyed: nvcc unregisters at exit, from atexit.
struct image_registry {
  std::mutex mutex;
  std::vector<std::unique_ptr<void*>> modules;
  std::map<const void*, registered_function> functions;  // by host stub address
  std::vector<registered_variable> variables;
  std::map<const void*, stand_in_binder> stand_ins_by_address;
  std::map<std::string, stand_in_binder> stand_ins_by_name;
};

image_registry& registry() {
  static image_registry* const r = new image_registry();
  return *r;
}

struct call_configuration {
  dim3 grid;
  dim3 block;
  std::size_t shared_bytes;
  cudaStream_t stream;
};

std::vector<call_configuration>& configurations() {
  thread_local std::vector<call_configuration> stack;
  return stack;
}

std::string demangle(const char* mangled) {
  int status = 0;
  char* text = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  if (status != 0 || text == nullptr) return mangled;
  std::string out(text);
  std::free(text);
  return out;
}

std::string without_parameters(const std::string& name) {
  // "fill<int>(int*, int)" -> "fill<int>"; a name with no parameter list is kept.
  int depth = 0;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (c == '<') ++depth;
    if (c == '>') --depth;
    if (c == '(' && depth == 0) return name.substr(0, i);
  }
  return name;
}

// The stand-in for the kernel at address, by address first and then by any of its names.
const stand_in_binder* find_stand_in(image_registry& r, const void* address,
                                     const registered_function& f) {
  if (const auto it = r.stand_ins_by_address.find(address); it != r.stand_ins_by_address.end())
    return &it->second;
  for (const std::string& key : {f.mangled, f.name, without_parameters(f.name)}) {
    if (const auto it = r.stand_ins_by_name.find(key); it != r.stand_ins_by_name.end())
      return &it->second;
  }
  return nullptr;
}

bool valid_dimensions(const dim3& grid, const dim3& block) {
  // The limits every device of compute capability 5.0 and later reports (CUDA C++ Programming
  // Guide, "Technical Specifications per Compute Capability").
  const unsigned long long threads =
      static_cast<unsigned long long>(block.x) * block.y * static_cast<unsigned long long>(block.z);
  return grid.x >= 1 && grid.y >= 1 && grid.z >= 1 && grid.x <= 0x7fffffffu && grid.y <= 65535 &&
         grid.z <= 65535 && block.x >= 1 && block.y >= 1 && block.z >= 1 && block.x <= 1024 &&
         block.y <= 1024 && block.z <= 64 && threads <= 1024;
}

cudaError_t launch_kernel(const char* api, const void* kernel, dim3 grid, dim3 block, void** args,
                          std::size_t shared_bytes, cudaStream_t stream, bool ptds) {
  return call(api, [&](state& g) -> cudaError_t {
    image_registry& r = registry();
    std::unique_lock<std::mutex> lock(r.mutex);
    const auto found = r.functions.find(kernel);
    if (kernel == nullptr || found == r.functions.end()) return cudaErrorInvalidDeviceFunction;
    const registered_function& f = found->second;
    CUstream_st* s = nullptr;
    if (const cudaError_t e = resolve_stream(g, stream, ptds, s); e != cudaSuccess) return e;
    if (const cudaError_t e = capture_check_enqueue(g, *s); e != cudaSuccess) return e;
    if (!valid_dimensions(grid, block)) return cudaErrorInvalidConfiguration;
    const auto limit =
        static_cast<std::size_t>(std::max(f.attributes.max_dynamic_shared_bytes, 48 * 1024));
    if (shared_bytes > limit) return cudaErrorInvalidValue;
    const stand_in_binder* binder = find_stand_in(r, kernel, f);
    if (binder == nullptr) {
      std::fprintf(stderr,
                   "cuscope::sim: kernel %s was launched (%s), but kernels do not run on the "
                   "simulated device; give it a host stand-in with cuscope::sim::register_kernel "
                   "(<cuscope/sim_kernels.hpp>)\n",
                   f.name.c_str(), api);
      std::fflush(stderr);
      return cudaErrorNoKernelImageForDevice;
    }
    const launch config{grid, block, shared_bytes, stream, f.name.c_str()};
    std::unique_ptr<std::function<void()>> work;
    try {
      work = std::make_unique<std::function<void()>>((*binder)(config, args));
    } catch (const std::bad_alloc&) {
      return cudaErrorMemoryAllocation;
    }
    lock.unlock();
    enqueue(g, *s, [work = std::move(work)] { (*work)(); });
    return cudaSuccess;
  });
}

}  // namespace

void register_stand_in(const void* kernel, const char* name, stand_in_binder binder) {
  if (kernel == nullptr && (name == nullptr || *name == '\0'))
    throw std::invalid_argument("cuscope::sim::register_kernel: no kernel address or name");
  image_registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (kernel != nullptr)
    r.stand_ins_by_address[kernel] = std::move(binder);
  else
    r.stand_ins_by_name[name] = std::move(binder);
}

}  // namespace cuscope::sim::detail

namespace cuscope::sim {

bool unregister_kernel(const void* kernel) {
  detail::image_registry& r = detail::registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.stand_ins_by_address.erase(kernel) != 0;
}

bool unregister_kernel(const char* name) {
  if (name == nullptr) return false;
  detail::image_registry& r = detail::registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.stand_ins_by_name.erase(name) != 0;
}

std::string kernel_name(const void* kernel) {
  detail::image_registry& r = detail::registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.functions.find(kernel);
  return it == r.functions.end() ? std::string() : it->second.name;
}

}  // namespace cuscope::sim

using namespace cuscope::sim::detail;

// nvcc's entry points are declared by its own headers only for code it compiles (crt/
// host_runtime.h, crt/device_functions.h); the simulation declares them here, with the same
// signatures. __cudaGetKernel and __cudaLaunchKernel (CUDA 13) take a cudaKernel_t, a pointer:
// the simulation hands out the kernel's host stub address as that handle.
extern "C" {

void** CUDARTAPI __cudaRegisterFatBinary(void* fat_cubin);
void CUDARTAPI __cudaRegisterFatBinaryEnd(void** module);
void CUDARTAPI __cudaUnregisterFatBinary(void** module);
char CUDARTAPI __cudaInitModule(void** module);
void CUDARTAPI __cudaRegisterFunction(void** module, const char* host_function,
                                      char* device_function, const char* device_name,
                                      int thread_limit, uint3* tid, uint3* bid, dim3* block,
                                      dim3* grid, int* warp_size);
void CUDARTAPI __cudaRegisterVar(void** module, char* host_variable, char* device_address,
                                 const char* device_name, int ext, std::size_t size, int constant,
                                 int global);
void CUDARTAPI __cudaRegisterManagedVar(void** module, void** host_variable_slot,
                                        char* device_address, const char* device_name, int ext,
                                        std::size_t size, int constant, int global);
unsigned CUDARTAPI __cudaPushCallConfiguration(dim3 grid, dim3 block, std::size_t shared_bytes,
                                               CUstream_st* stream);
cudaError_t CUDARTAPI __cudaPopCallConfiguration(dim3* grid, dim3* block, std::size_t* shared_bytes,
                                                 void* stream);
cudaError_t CUDARTAPI __cudaGetKernel(void** kernel, const void* host_function);
cudaError_t CUDARTAPI __cudaLaunchKernel(void* kernel, dim3 grid, dim3 block, void** args,
                                         std::size_t shared_bytes, cudaStream_t stream);
cudaError_t CUDARTAPI __cudaLaunchKernel_ptsz(void* kernel, dim3 grid, dim3 block, void** args,
                                              std::size_t shared_bytes, cudaStream_t stream);
// The per-thread forms that <cuda_runtime_api.h> names under CUDA_API_PER_THREAD_DEFAULT_STREAM.
cudaError_t CUDARTAPI cudaLaunchKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args,
                                            std::size_t shared_bytes, cudaStream_t stream);
cudaError_t CUDARTAPI cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func,
                                               void** args);

void** CUDARTAPI __cudaRegisterFatBinary(void*) {
  image_registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.modules.push_back(std::make_unique<void*>(nullptr));
  return r.modules.back().get();
}

void CUDARTAPI __cudaRegisterFatBinaryEnd(void**) {}

void CUDARTAPI __cudaUnregisterFatBinary(void** module) {
  image_registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto it = r.functions.begin(); it != r.functions.end();)
    it = it->second.module == module ? r.functions.erase(it) : std::next(it);
  for (auto it = r.variables.begin(); it != r.variables.end();) {
    if (it->module != module) {
      ++it;
      continue;
    }
    if (it->managed_slot != nullptr) *it->managed_slot = nullptr;
    std::free(it->managed_memory);
    it = r.variables.erase(it);
  }
  for (auto it = r.modules.begin(); it != r.modules.end(); ++it) {
    if (it->get() == module) {
      r.modules.erase(it);
      break;
    }
  }
}

char CUDARTAPI __cudaInitModule(void**) {
  return 1;
}

void CUDARTAPI __cudaRegisterFunction(void** module, const char* host_function, char*,
                                      const char* device_name, int, uint3*, uint3*, dim3*, dim3*,
                                      int*) {
  image_registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  registered_function& f = r.functions[host_function];
  f.module = module;
  f.mangled = device_name != nullptr ? device_name : "";
  f.name = demangle(f.mangled.c_str());
}

void CUDARTAPI __cudaRegisterVar(void** module, char*, char*, const char* device_name, int,
                                 std::size_t size, int, int) {
  image_registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.variables.push_back(
      {module, device_name != nullptr ? device_name : "", size, nullptr, nullptr});
}

// A __managed__ variable: host code reaches it through the address stored in *slot. The
// simulation gives it zeroed host memory of its size (the initializer lives in the device image,
// which the simulation does not read).
void CUDARTAPI __cudaRegisterManagedVar(void** module, void** slot, char*, const char* device_name,
                                        int, std::size_t size, int, int) {
  image_registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  void* memory = std::calloc(size == 0 ? 1 : size, 1);
  if (memory == nullptr) {
    std::fprintf(stderr, "cuscope::sim: no host memory for the __managed__ variable %s\n",
                 device_name != nullptr ? device_name : "?");
    std::abort();
  }
  if (slot != nullptr) *slot = memory;
  r.variables.push_back({module, device_name != nullptr ? device_name : "", size, slot, memory});
}

unsigned CUDARTAPI __cudaPushCallConfiguration(dim3 grid, dim3 block, std::size_t shared_bytes,
                                               CUstream_st* stream) {
  configurations().push_back({grid, block, shared_bytes, stream});
  return 0;
}

cudaError_t CUDARTAPI __cudaPopCallConfiguration(dim3* grid, dim3* block, std::size_t* shared_bytes,
                                                 void* stream) {
  std::vector<call_configuration>& stack = configurations();
  if (stack.empty()) return cudaErrorMissingConfiguration;
  const call_configuration c = stack.back();
  stack.pop_back();
  *grid = c.grid;
  *block = c.block;
  *shared_bytes = c.shared_bytes;
  *static_cast<cudaStream_t*>(stream) = c.stream;
  return cudaSuccess;
}

cudaError_t CUDARTAPI __cudaGetKernel(void** kernel, const void* host_function) {
  if (kernel == nullptr) return cudaErrorInvalidValue;
  *kernel = const_cast<void*>(host_function);
  return cudaSuccess;
}

cudaError_t CUDARTAPI __cudaLaunchKernel(void* kernel, dim3 grid, dim3 block, void** args,
                                         std::size_t shared_bytes, cudaStream_t stream) {
  return launch_kernel("cudaLaunchKernel", kernel, grid, block, args, shared_bytes, stream, false);
}

cudaError_t CUDARTAPI __cudaLaunchKernel_ptsz(void* kernel, dim3 grid, dim3 block, void** args,
                                              std::size_t shared_bytes, cudaStream_t stream) {
  return launch_kernel("cudaLaunchKernel", kernel, grid, block, args, shared_bytes, stream, true);
}

cudaError_t CUDARTAPI cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args,
                                       std::size_t shared_bytes, cudaStream_t stream) {
  return launch_kernel("cudaLaunchKernel", func, grid, block, args, shared_bytes, stream, false);
}

cudaError_t CUDARTAPI cudaLaunchKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args,
                                            std::size_t shared_bytes, cudaStream_t stream) {
  return launch_kernel("cudaLaunchKernel", func, grid, block, args, shared_bytes, stream, true);
}

cudaError_t CUDARTAPI cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func,
                                          void** args) {
  if (config == nullptr)
    return call("cudaLaunchKernelExC", [](state&) { return cudaErrorInvalidValue; });
  return launch_kernel("cudaLaunchKernelExC", func, config->gridDim, config->blockDim, args,
                       config->dynamicSmemBytes, config->stream, false);
}

cudaError_t CUDARTAPI cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func,
                                               void** args) {
  if (config == nullptr)
    return call("cudaLaunchKernelExC", [](state&) { return cudaErrorInvalidValue; });
  return launch_kernel("cudaLaunchKernelExC", func, config->gridDim, config->blockDim, args,
                       config->dynamicSmemBytes, config->stream, true);
}

cudaError_t CUDARTAPI cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
  return call("cudaFuncGetAttributes", [&](state&) -> cudaError_t {
    if (attr == nullptr) return cudaErrorInvalidValue;
    image_registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    const auto it = r.functions.find(func);
    if (it == r.functions.end()) return cudaErrorInvalidDeviceFunction;
    // What the simulation knows of a kernel: the limits of the device and what
    // cudaFuncSetAttribute set. Register and local memory use live in the device image, which the
    // simulation does not read: reported as 0.
    *attr = cudaFuncAttributes{};
    attr->maxThreadsPerBlock = 1024;
    attr->maxDynamicSharedSizeBytes = it->second.attributes.max_dynamic_shared_bytes;
    attr->preferredShmemCarveout = it->second.attributes.preferred_carveout;
    return cudaSuccess;
  });
}

cudaError_t CUDARTAPI cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  return call("cudaFuncSetAttribute", [&](state&) -> cudaError_t {
    image_registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    const auto it = r.functions.find(func);
    if (it == r.functions.end()) return cudaErrorInvalidDeviceFunction;
    switch (attr) {
      case cudaFuncAttributeMaxDynamicSharedMemorySize:
        // sharedMemPerBlockOptin of the simulated device.
        if (value < 0 || value > 227 * 1024) return cudaErrorInvalidValue;
        it->second.attributes.max_dynamic_shared_bytes = value;
        return cudaSuccess;
      case cudaFuncAttributePreferredSharedMemoryCarveout:
        if (value < -1 || value > 100) return cudaErrorInvalidValue;
        it->second.attributes.preferred_carveout = value;
        return cudaSuccess;
      default:
        return cudaErrorInvalidValue;
    }
  });
}

}  // extern "C"
