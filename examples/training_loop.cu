// SPDX-License-Identifier: Apache-2.0
// cuscope-example: also simulated
//
// A small training loop: logistic regression trained by minibatch SGD on synthetic data. The
// dataset stays in host memory and reaches the device batch by batch through cuscope::batches,
// the copy of the next batch overlapping the work on the current one; each batch's loss comes
// back through the range's output. Each epoch runs in a cuscope::session, whose report says what
// the epoch held and gave back. Prints the loss per epoch and fails unless it went down.
//
// nvcc builds it for the GPU (training_loop), with kernels for the gradient and the update. The
// same file compiled as C++ runs on the simulated device (training_loop_sim), where host
// functions enqueued in stream order stand in for the kernels.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <cuscope/cuscope.hpp>
#include <cuscope/trace.hpp>
#include <exception>
#include <random>
#include <string>
#include <vector>

#if !defined(__CUDACC__)
#  if !CUSCOPE_EXAMPLE_SIMULATED
#    error "without nvcc, training_loop runs on the simulated device only"
#  endif
#  include <cuscope/sim.hpp>
#endif

constexpr int features = 16;
constexpr std::size_t sample_elements = features + 1;  // the features, then the label (0 or 1)
constexpr std::size_t parameters = features + 1;       // the weights, then the bias
constexpr std::size_t samples = std::size_t{1} << 16;
constexpr std::size_t batch_size = 512;
constexpr int epochs = 6;
constexpr float learning_rate = 0.5f;

// What the work on one batch needs; on the simulated device it is also the host function's data,
// so one is kept per batch until the work has run.
struct step {
  const float* batch = nullptr;  // samples x sample_elements
  std::size_t count = 0;         // samples in the batch
  float* weights = nullptr;      // parameters
  float* gradient = nullptr;     // parameters, zero between steps
  float* loss = nullptr;         // the batch's summed loss (the range's output)
};

#if defined(__CUDACC__)

constexpr int threads = 256;

// Sums the gradient of the log loss over the batch into gradient, and the loss into *loss.
static __global__ void gradient_kernel(step s) {
  __shared__ float g[parameters];
  __shared__ float l;
  if (threadIdx.x < parameters) g[threadIdx.x] = 0.0f;
  if (threadIdx.x == 0) l = 0.0f;
  __syncthreads();
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < s.count) {
    const float* x = s.batch + i * sample_elements;
    const float y = x[features];
    float z = s.weights[features];
    for (int j = 0; j < features; ++j)
      z += s.weights[j] * x[j];
    const float p = 1.0f / (1.0f + expf(-z));
    const float error = p - y;
    for (int j = 0; j < features; ++j)
      atomicAdd(&g[j], error * x[j]);
    atomicAdd(&g[features], error);
    atomicAdd(&l, fmaxf(z, 0.0f) + log1pf(expf(-fabsf(z))) - y * z);
  }
  __syncthreads();
  if (threadIdx.x < parameters) atomicAdd(&s.gradient[threadIdx.x], g[threadIdx.x]);
  if (threadIdx.x == 0) atomicAdd(s.loss, l);
}

// One SGD step on the mean gradient; clears the gradient for the next batch.
static __global__ void update_kernel(step s, float rate) {
  const unsigned j = threadIdx.x;
  if (j < parameters) {
    s.weights[j] -= rate * s.gradient[j] / static_cast<float>(s.count);
    s.gradient[j] = 0.0f;
  }
}

static void enqueue_step(cuscope::stream_ref stream, step& s) {
  CUSCOPE_CUDA_TRY(cudaMemsetAsync(s.loss, 0, sizeof(float), stream.get()));
  const unsigned blocks = static_cast<unsigned>((s.count + threads - 1) / threads);
  gradient_kernel<<<blocks, threads, 0, stream.get()>>>(s);
  CUSCOPE_CUDA_TRY(cudaGetLastError());
  update_kernel<<<1, 32, 0, stream.get()>>>(s, learning_rate);
  CUSCOPE_CUDA_TRY(cudaGetLastError());
}

#else

// The same step on the host, run in stream order on the user's stream: it reads and writes the
// simulated device's memory through host_view, as the kernels would on a GPU.
static void host_step(void* data) {
  const step& s = *static_cast<step*>(data);
  const float* batch = cuscope::sim::host_view(s.batch, s.count * sample_elements);
  float* w = cuscope::sim::host_view(s.weights, parameters);
  float* g = cuscope::sim::host_view(s.gradient, parameters);
  float* loss = cuscope::sim::host_view(s.loss, 1);
  float l = 0.0f;
  for (std::size_t i = 0; i < s.count; ++i) {
    const float* x = batch + i * sample_elements;
    const float y = x[features];
    float z = w[features];
    for (int j = 0; j < features; ++j)
      z += w[j] * x[j];
    const float p = 1.0f / (1.0f + std::exp(-z));
    const float error = p - y;
    for (int j = 0; j < features; ++j)
      g[j] += error * x[j];
    g[features] += error;
    l += std::fmax(z, 0.0f) + std::log1p(std::exp(-std::fabs(z))) - y * z;
  }
  *loss = l;
  for (std::size_t j = 0; j < parameters; ++j) {
    w[j] -= learning_rate * g[j] / static_cast<float>(s.count);
    g[j] = 0.0f;
  }
}

static void enqueue_step(cuscope::stream_ref stream, step& s) {
  CUSCOPE_CUDA_TRY(cudaLaunchHostFunc(stream.get(), &host_step, &s));
}

#endif

// Features from a normal distribution; the label drawn with the probability a hidden model gives.
static std::vector<float> make_dataset() {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<float> truth(parameters);
  for (std::size_t j = 0; j < parameters; ++j)
    truth[j] = 1.5f * std::sin(static_cast<float>(j) + 1.0f);
  std::vector<float> data(samples * sample_elements);
  for (std::size_t i = 0; i < samples; ++i) {
    float* x = &data[i * sample_elements];
    float z = truth[features];
    for (int j = 0; j < features; ++j) {
      x[j] = normal(rng);
      z += truth[static_cast<std::size_t>(j)] * x[j];
    }
    x[features] = uniform(rng) < 1.0f / (1.0f + std::exp(-z)) ? 1.0f : 0.0f;
  }
  return data;
}

static int run(const char* trace_path) {
  // The model lives across epochs, in a pool of its own; the gradient and the batches live in one
  // epoch each, and each epoch's session gives their pool's memory back to the driver.
  cuscope::recorder recorder;  // records only when attached, below
  cuscope::memory_pool model_pool;
  cuscope::memory_pool pool;
  if (trace_path != nullptr) {
    model_pool.set_recorder(&recorder, "model");
    pool.set_recorder(&recorder, "epochs");
  }
  cuscope::stream stream;
  const std::vector<float> data = make_dataset();
  const std::vector<float> zeros(parameters, 0.0f);
  cuscope::device_buffer<float> weights(stream, zeros, model_pool);

  std::vector<double> losses;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    cuscope::session session(pool, stream, "epoch " + std::to_string(epoch));
    {
      cuscope::device_buffer<float> gradient = session.make_buffer<float>(parameters);
      gradient.copy_from(stream, zeros);
      const std::size_t batch_count = (samples + batch_size - 1) / batch_size;
      std::vector<float> batch_losses(batch_count, 0.0f);
      std::vector<step> steps(batch_count);  // outlives the range, which waits for the work
      cuscope::batch_options options;
      options.sample_elements = sample_elements;
      options.depth = 2;
      auto range = cuscope::batches(stream, data, batch_size, session.pool(),
                                    cuscope::output_per_batch(batch_losses, 1), options);
      for (const auto& b : range) {
        step& s = steps[b.index()];
        s.batch = b.span().data();
        s.count = b.samples();
        s.weights = weights.data();
        s.gradient = gradient.data();
        s.loss = b.output().data();
        enqueue_step(stream, s);
      }
      // The range has finished: every batch's loss is in batch_losses.
      double total = 0;
      for (std::size_t k = 0; k < range.batch_count(); ++k)
        total += static_cast<double>(batch_losses[k]);
      losses.push_back(total / static_cast<double>(samples));
      std::printf("epoch %d: mean loss %.4f over %zu batches of %zu samples\n", epoch,
                  losses.back(), range.batch_count(), range.batch_size());
    }
    std::printf("%s", session.finish().to_string().c_str());
  }
  if (trace_path != nullptr) {
    cuscope::write_chrome_trace(recorder, trace_path);
    std::printf("wrote the trace of %llu events to %s\n",
                static_cast<unsigned long long>(recorder.recorded()), trace_path);
  }
  const std::vector<float> w = weights.to_vector(stream);
  std::printf("bias %.3f, first weights %.3f %.3f %.3f\n", static_cast<double>(w[features]),
              static_cast<double>(w[0]), static_cast<double>(w[1]), static_cast<double>(w[2]));
  if (!(losses.back() < losses.front())) {
    std::printf("FAILED: the loss did not go down (%.4f -> %.4f)\n", losses.front(), losses.back());
    return 1;
  }
  std::printf("the loss went down: %.4f -> %.4f\n", losses.front(), losses.back());
  return 0;
}

int main(int argc, char** argv) {
  const char* trace_path = nullptr;
  if (argc == 3 && std::strcmp(argv[1], "--trace") == 0) {
    trace_path = argv[2];
  } else if (argc != 1) {
    std::fprintf(stderr, "usage: %s [--trace FILE]\n", argv[0]);
    return 2;
  }
  if (cuscope::device_count() == 0) {
    std::printf("training_loop: no CUDA device\n");
    return 77;  // ctest: skipped
  }
  cudaDeviceProp prop{};
  CUSCOPE_CUDA_TRY(cudaGetDeviceProperties(&prop, 0));
  std::printf("training_loop on %s (%s)\n", prop.name,
              CUSCOPE_EXAMPLE_SIMULATED ? "simulated device" : "GPU");
  int result = 1;
  try {
    result = run(trace_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "training_loop: %s\n", e.what());
  }
#if !CUSCOPE_EXAMPLE_SIMULATED
  // Everything run() made is gone. Destroying the context lets tools that watch the program's end
  // (compute-sanitizer's leak check, profilers) see all of it.
  const cudaError_t reset = cudaDeviceReset();
  if (reset != cudaSuccess) {
    std::fprintf(stderr, "training_loop: cudaDeviceReset: %s\n", cudaGetErrorString(reset));
    result = 1;
  }
#endif
  return result;
}
