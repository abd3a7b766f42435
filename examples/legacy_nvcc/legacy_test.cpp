// SPDX-License-Identifier: Apache-2.0
// The converted program's training, run on the simulated device with a host stand-in for each
// kernel of kernels.cuh, checked against the same arithmetic on the host. The kernels are defined
// in kernels.cu, so this C++ file names them by their names and parameter types.
#include <cmath>
#include <cstdio>
#include <cuscope/sim.hpp>

#include "legacy.hpp"

namespace {

namespace sim = cuscope::sim;

std::size_t count(int n) {
  return static_cast<std::size_t>(n);
}

void give_kernels_stand_ins() {
  const auto fill = [](const sim::launch&, float* x, int n, float value) {
    float* h = sim::host_view(x, count(n));
    for (int i = 0; i < n; ++i)
      h[i] = value;
  };
  const auto axpy = [](const sim::launch&, float* y, const float* x, int n, float a) {
    float* hy = sim::host_view(y, count(n));
    const float* hx = sim::host_view(x, count(n));
    for (int i = 0; i < n; ++i)
      hy[i] += a * hx[i];
  };
  const auto partial_sum_squares = [](const sim::launch& l, const float* x, int n, float* partial) {
    const float* hx = sim::host_view(x, count(n));
    float* hp = sim::host_view(partial, l.grid.x);
    for (unsigned b = 0; b < l.grid.x; ++b) {
      hp[b] = 0.0f;
      for (unsigned t = 0; t < l.block.x; ++t) {
        const unsigned i = b * l.block.x + t;
        if (i < count(n)) hp[b] += hx[i] * hx[i];
      }
    }
  };
  const auto finish_sum = [](const sim::launch&, const float* partial, int blocks, float* result) {
    const float* hp = sim::host_view(partial, count(blocks));
    float total = 0.0f;
    for (int i = 0; i < blocks; ++i)
      total += hp[i];
    *sim::host_view(result, 1) = total;
  };
  // The kernels' names and parameter types, as kernels.cuh declares them.
  sim::register_kernel<float*, int, float>("fill", fill);
  sim::register_kernel<float*, const float*, int, float>("axpy", axpy);
  sim::register_kernel<const float*, int, float*>("partial_sum_squares", partial_sum_squares);
  sim::register_kernel<const float*, int, float*>("finish_sum", finish_sum);
}

}  // namespace

int main() {
  give_kernels_stand_ins();
  const int n = 1000;
  setup(n);
  initialize(1.0f, 0.5f);
  float norm = 0.0f;
  for (int i = 0; i < 3; ++i)
    norm = step(0.1f);
  const std::vector<float> weights = save_checkpoint();
  teardown();

  // Each weight is 1 - 3 * 0.1 * 0.5 = 0.85; the squared norm is n * 0.85^2.
  const float expected = static_cast<float>(n) * 0.85f * 0.85f;
  int failures = 0;
  for (float w : weights)
    if (std::fabs(w - 0.85f) > 1e-5f) ++failures;
  if (failures != 0 || std::fabs(norm - expected) > 1e-2f) {
    std::printf("FAILED: %d weights differ from 0.85; squared norm %g, expected %g\n", failures,
                static_cast<double>(norm), static_cast<double>(expected));
    return 1;
  }
  if (sim::outstanding_allocations() != 0) {
    std::printf("FAILED: allocations outstanding after teardown:\n%s",
                sim::outstanding_report().c_str());
    return 1;
  }
  std::printf("stand-ins: every weight is 0.85, squared norm %.2f\n", static_cast<double>(norm));
  return 0;
}
