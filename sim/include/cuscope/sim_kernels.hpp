// SPDX-License-Identifier: Apache-2.0
/// @file
/// @brief Host stand-ins for kernels on the simulated CUDA device (included by <cuscope/sim.hpp>).
///
/// The simulated device provides nvcc's registration and launch entry points, so a program whose
/// translation units nvcc compiled links and runs on it. Kernels themselves do not run there: a
/// launch fails with cudaErrorNoKernelImageForDevice and a line on stderr that names the kernel,
/// unless the kernel has a host stand-in. A stand-in is a host function that receives the launch's
/// configuration and a copy of its arguments; it runs in stream order, where and when a host
/// function enqueued with cudaLaunchHostFunc would run, and reaches device memory through
/// host_view(). Like a host function, it must not call the CUDA runtime.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace cuscope::sim {

/// @brief The configuration of a kernel launch, as a stand-in receives it.
struct launch {
  dim3 grid;                 ///< Blocks in the grid.
  dim3 block;                ///< Threads in a block.
  std::size_t shared_bytes;  ///< Dynamic shared memory requested.
  cudaStream_t stream;       ///< The stream the launch was enqueued on, as the caller named it.
  const char* kernel;        ///< The kernel's registered name, demangled.
};

namespace detail {

/// Copies a launch's arguments out of the array nvcc passes (one pointer per parameter) and
/// returns the work that runs the stand-in on them.
using stand_in_binder = std::function<std::function<void()>(const launch&, void** args)>;

void register_stand_in(const void* kernel, const char* name, stand_in_binder binder);

template <class... Params, class F, std::size_t... I>
stand_in_binder make_binder(F&& stand_in, std::index_sequence<I...>) {
  return [f = std::forward<F>(stand_in)](const launch& config, void** args) {
    // The arguments are copied when the kernel is launched, as CUDA copies them.
    auto values = std::make_tuple(*static_cast<std::decay_t<Params>*>(args[I])...);
    return std::function<void()>([f, config, values] { f(config, std::get<I>(values)...); });
  };
}

}  // namespace detail

/// @brief Gives kernel a host stand-in, called as stand_in(const launch&, arguments...) for each
/// launch of kernel (<<<...>>>, cudaLaunchKernel or cudaLaunchKernelExC), in stream order.
/// Replaces an earlier stand-in of the same kernel. Enqueued launches keep the one they found.
/// @throws std::invalid_argument when kernel is null.
template <class... Params, class F>
void register_kernel(void (*kernel)(Params...), F stand_in) {
  static_assert(std::is_invocable_v<const F&, const launch&, std::decay_t<Params>&...>,
                "a stand-in takes (const cuscope::sim::launch&, the kernel's parameters...)");
  detail::register_stand_in(
      reinterpret_cast<const void*>(kernel), nullptr,
      detail::make_binder<Params...>(std::move(stand_in), std::index_sequence_for<Params...>{}));
}

/// @brief Gives the kernel registered under name a host stand-in, for kernels whose address the
/// caller cannot name (a kernel defined in another translation unit). name is the kernel's
/// mangled name, its demangled signature ("scale(float*, int)") or its demangled name without
/// parameters ("scale", "fill<int>"). Params are the kernel's parameter types, in order.
/// @throws std::invalid_argument when name is null or empty.
template <class... Params, class F>
void register_kernel(const char* name, F stand_in) {
  static_assert(std::is_invocable_v<const F&, const launch&, std::decay_t<Params>&...>,
                "a stand-in takes (const cuscope::sim::launch&, the kernel's parameters...)");
  detail::register_stand_in(
      nullptr, name,
      detail::make_binder<Params...>(std::move(stand_in), std::index_sequence_for<Params...>{}));
}

/// @brief Removes the stand-in of kernel; false when it had none.
bool unregister_kernel(const void* kernel);

/// @brief Removes the stand-in registered under name; false when there was none.
bool unregister_kernel(const char* name);

/// @brief Typed form of unregister_kernel for a kernel's address.
template <class... Params>
bool unregister_kernel(void (*kernel)(Params...)) {
  return unregister_kernel(reinterpret_cast<const void*>(kernel));
}

/// @brief The name nvcc registered for kernel, demangled; empty when nvcc registered no kernel
/// at that address.
[[nodiscard]] std::string kernel_name(const void* kernel);

/// @brief Typed form of kernel_name.
template <class... Params>
[[nodiscard]] std::string kernel_name(void (*kernel)(Params...)) {
  return kernel_name(reinterpret_cast<const void*>(kernel));
}

}  // namespace cuscope::sim
