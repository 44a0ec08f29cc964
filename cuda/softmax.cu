// warpgauge CUDA softmax program: checks four FP32 row-softmax kernels against an FP64 CPU
// reference, then times them with CUDA events in rotating order and writes one JSON document.
//
//   build/softmax [--rows R] [--width W] [--ld LD] [--offset F] [--rounds N] [--inner K]
//                 [--warmup-ms MS] [--pad-us US] [--seed S] [--suite full|quick]
//                 [--json PATH] [--self-check] [--device D]
//
// Human-readable progress goes to stderr; the JSON document goes to --json PATH (written to a
// temporary file and renamed) or to stdout. Exit status: 0 all checks passed (with --self-check:
// the broken variant was caught and the real kernels passed), 1 a check failed, 2 usage or
// CUDA error. The kernels themselves live in softmax_kernels.cuh.

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <limits>
#include <string>
#include <vector>

#include "softmax_kernels.cuh"

// Every CUDA runtime call goes through CUDA_CHECK; every launch is followed by LAUNCH_CHECK
// (launch-configuration errors) and, in the correctness path, by a checked synchronize
// (errors raised while the kernel runs).
#define CUDA_CHECK(call)                                                                    \
  do {                                                                                      \
    const cudaError_t err_ = (call);                                                        \
    if (err_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s:%d: CUDA error in %s: %s (%s)\n", __FILE__, __LINE__, #call, \
                   cudaGetErrorName(err_), cudaGetErrorString(err_));                       \
      std::exit(2);                                                                         \
    }                                                                                       \
  } while (0)
#define LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

namespace {

constexpr double kTol = 2e-5;       // max abs error and |row sum - reference row sum|
constexpr size_t kGuard = 64;       // NaN floats after each buffer, must stay NaN
constexpr uint32_t kPoison = 0xFFFFFFFFu;  // cudaMemset(0xFF) pattern: a quiet NaN

[[noreturn]] void usage_error(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fprintf(stderr, "softmax: ");
  std::vfprintf(stderr, fmt, ap);
  std::fprintf(stderr, "\n(run with --help for the options)\n");
  va_end(ap);
  std::exit(2);
}

// ------------------------------------------------------------------------------------------
// Kernels under test.

using KernelFn = void (*)(const float*, float*, int, int, long long);

// kReal: checked, gates the exit status, timed. kBroken: only with --self-check, must fail.
// kDiagnostic: checked and reported in every run, never a gate, never timed.
enum class Role { kReal, kBroken, kDiagnostic };

struct Kernel {
  const char* name;
  KernelFn fn;
  bool one_thread_per_row;
  int reads;  // passes over the input row (requested traffic = reads + 1 write)
  Role role;
  const char* what;
};

const Kernel kKernels[] = {
    {"softmax_serial", wg::softmax_serial, true, 3, Role::kReal,
     "one thread per row, three passes, Kahan-compensated sum (the weak baseline)"},
    {"softmax_parallel", wg::softmax_parallel, false, 3, Role::kReal,
     "one 256-thread block per row; max, sum and write passes"},
    {"softmax_online_scalar", wg::softmax_online_scalar, false, 2, Role::kReal,
     "one block per row; online (max, sum) pass, then the write pass"},
    {"softmax_online", wg::softmax_online, false, 2, Role::kReal,
     "online kernel with 16-byte float4 loads/stores (scalar head, float4 body, scalar tail)"},
};
const Kernel kBrokenKernel = {"softmax_online_broken", wg::softmax_online_broken, false, 2,
                              Role::kBroken,
                              "softmax_online whose write pass skips each row's last float4"};
const Kernel kDiagnosticKernel = {
    "softmax_serial_uncompensated", wg::softmax_serial_uncompensated, true, 3, Role::kDiagnostic,
    "softmax_serial with a plain FP32 running sum: shows what the compensation changes"};
constexpr int kNumKernels = sizeof(kKernels) / sizeof(kKernels[0]);

dim3 grid_for(const Kernel& k, int rows) {
  if (k.one_thread_per_row) return dim3((rows + wg::kSerialBlock - 1) / wg::kSerialBlock);
  return dim3(rows);
}
dim3 block_for(const Kernel& k) {
  return dim3(k.one_thread_per_row ? wg::kSerialBlock : wg::kBlock);
}

void launch(const Kernel& k, const float* x, float* y, int rows, int width, long long ld) {
  k.fn<<<grid_for(k, rows), block_for(k)>>>(x, y, rows, width, ld);
  LAUNCH_CHECK();
}

// ------------------------------------------------------------------------------------------
// Options.

struct Options {
  int rows = 1024;
  int width = 1024;
  long long ld = 0;  // 0: same as width
  int offset = 0;    // floats added to both base pointers (misaligns every row by 4*offset B)
  int rounds = 300;
  int inner = 1;
  double warmup_ms = 250.0;
  double pad_us = 100.0;
  uint64_t seed = 20261130;
  bool quick = false;
  bool self_check = false;
  const char* json_path = nullptr;
  int device = 0;
};

void print_help() {
  std::printf(
      "usage: softmax [options]\n"
      "  --rows R          rows of the timed matrix (default 1024)\n"
      "  --width W         row width, the softmax dim (default 1024)\n"
      "  --ld LD           floats between row starts, >= W (default W)\n"
      "  --offset F        floats added to the base pointers; F %% 4 != 0 misaligns rows (default 0)\n"
      "  --rounds N        timing rounds; each kernel gives one sample per round (default 300)\n"
      "  --inner K         launches per sample; times are reported per launch (default 1)\n"
      "  --warmup-ms MS    compute warm-up before sampling (default 250; 0 skips it)\n"
      "  --pad-us US       GPU busy pad before each round, hides host enqueue (default 100)\n"
      "  --seed S          input seed (default 20261130)\n"
      "  --suite full|quick  correctness cases: full (default) or small ones + the timed shape\n"
      "  --self-check      also run a deliberately broken kernel; exit 0 only if it is caught\n"
      "                    and the real kernels pass (no timing)\n"
      "  --json PATH       write the JSON document to PATH (default: stdout)\n"
      "  --device D        CUDA device index (default 0)\n");
}

long long parse_int(const char* flag, const char* v, long long lo, long long hi) {
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v, &end, 10);
  if (errno || end == v || *end || n < lo || n > hi)
    usage_error("%s expects an integer in [%lld, %lld], got '%s'", flag, lo, hi, v);
  return n;
}

double parse_double(const char* flag, const char* v, double lo, double hi) {
  char* end = nullptr;
  const double d = std::strtod(v, &end);
  if (end == v || *end || !(d >= lo && d <= hi))
    usage_error("%s expects a number in [%g, %g], got '%s'", flag, lo, hi, v);
  return d;
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage_error("%s needs a value", a);
      return argv[++i];
    };
    if (!std::strcmp(a, "--help") || !std::strcmp(a, "-h")) {
      print_help();
      std::exit(0);
    } else if (!std::strcmp(a, "--rows")) {
      o.rows = static_cast<int>(parse_int(a, value(), 1, 1 << 30));
    } else if (!std::strcmp(a, "--width")) {
      o.width = static_cast<int>(parse_int(a, value(), 1, 1 << 30));
    } else if (!std::strcmp(a, "--ld")) {
      o.ld = parse_int(a, value(), 1, 1LL << 40);
    } else if (!std::strcmp(a, "--offset")) {
      o.offset = static_cast<int>(parse_int(a, value(), 0, 1 << 20));
    } else if (!std::strcmp(a, "--rounds")) {
      o.rounds = static_cast<int>(parse_int(a, value(), 1, 1 << 24));
    } else if (!std::strcmp(a, "--inner")) {
      o.inner = static_cast<int>(parse_int(a, value(), 1, 1 << 16));
    } else if (!std::strcmp(a, "--warmup-ms")) {
      o.warmup_ms = parse_double(a, value(), 0.0, 600000.0);
    } else if (!std::strcmp(a, "--pad-us")) {
      o.pad_us = parse_double(a, value(), 0.0, 1e6);
    } else if (!std::strcmp(a, "--seed")) {
      o.seed = static_cast<uint64_t>(parse_int(a, value(), 0, INT64_MAX));
    } else if (!std::strcmp(a, "--suite")) {
      const char* v = value();
      if (!std::strcmp(v, "quick")) o.quick = true;
      else if (!std::strcmp(v, "full")) o.quick = false;
      else usage_error("--suite expects full or quick, got '%s'", v);
    } else if (!std::strcmp(a, "--self-check")) {
      o.self_check = true;
    } else if (!std::strcmp(a, "--json")) {
      o.json_path = value();
    } else if (!std::strcmp(a, "--device")) {
      o.device = static_cast<int>(parse_int(a, value(), 0, 1024));
    } else {
      usage_error("unknown argument '%s'", a);
    }
  }
  if (o.ld == 0) o.ld = o.width;
  if (o.ld < o.width) usage_error("--ld (%lld) must be >= --width (%d)", o.ld, o.width);
  return o;
}

// ------------------------------------------------------------------------------------------
// Inputs and the FP64 reference.

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [-6, 6), never exactly zero.
float random_value(uint64_t& s) {
  const uint32_t u = static_cast<uint32_t>(splitmix64(s) >> 40);  // 24 random bits
  const float v = static_cast<float>(u) * (12.0f / 16777216.0f) - 6.0f;
  return v == 0.0f ? 0.001f : v;
}

struct Case {
  std::string name;
  int rows, width;
  long long ld;
  int in_off, out_off;  // floats before row 0 in the input / output allocation
  bool masked;          // add the masked-row patterns
  bool timed;           // the shape the timing uses (kept on the device afterwards)
};

// Masked rows, applied when `masked` (each only if the matrix has that row):
//   row 0: -inf prefix of width/2 + 1      row 3: -inf prefix of 3
//   row 1: -inf prefix of width - 1        row 4: every third value -inf, starting with the first
//   row 2: all -inf (expects all zeros)    row 5: values shifted by +100 (exp overflows unshifted)
//   last row (if rows > 6): -inf prefix of width - 2
void fill_input(const Case& c, uint64_t seed, std::vector<float>& x) {
  const float ninf = -INFINITY;
  uint64_t s = seed ^ (static_cast<uint64_t>(c.rows) << 32) ^ static_cast<uint64_t>(c.width);
  for (int r = 0; r < c.rows; ++r) {
    float* row = x.data() + c.in_off + r * c.ld;
    for (int i = 0; i < c.width; ++i) row[i] = random_value(s);
    if (!c.masked) continue;
    const int w = c.width;
    auto prefix = [&](int n) {
      n = std::max(0, std::min(n, w));
      for (int i = 0; i < n; ++i) row[i] = ninf;
    };
    if (r == 0) prefix(std::min(w / 2 + 1, w - 1));
    if (r == 1) prefix(w - 1);
    if (r == 2) prefix(w);
    if (r == 3) prefix(std::min(3, w - 1));
    if (r == 4)
      for (int i = 0; i < w; i += 3) row[i] = ninf;
    if (r == 5)
      for (int i = 0; i < w; ++i) row[i] += 100.0f;
    if (r == c.rows - 1 && r > 5) prefix(w - 2);
  }
}

// FP64 softmax of each row; an all -inf row is all zeros.
void reference(const Case& c, const std::vector<float>& x, std::vector<double>& ref,
               std::vector<double>& ref_sum) {
  ref.assign(static_cast<size_t>(c.rows) * c.width, 0.0);
  ref_sum.assign(c.rows, 0.0);
  for (int r = 0; r < c.rows; ++r) {
    const float* row = x.data() + c.in_off + r * c.ld;
    double* out = ref.data() + static_cast<size_t>(r) * c.width;
    double m = -INFINITY;
    for (int i = 0; i < c.width; ++i) m = std::max(m, static_cast<double>(row[i]));
    if (m == -INFINITY) continue;
    double s = 0.0;
    for (int i = 0; i < c.width; ++i) s += (out[i] = std::exp(static_cast<double>(row[i]) - m));
    double total = 0.0;
    for (int i = 0; i < c.width; ++i) total += (out[i] /= s);
    ref_sum[r] = total;
  }
}

struct CheckResult {
  std::string kernel, case_name;
  double max_abs_err = 0.0;
  double max_row_sum_err = 0.0;
  long long nonfinite = 0;     // NaN or inf outputs (includes unwritten, still-poisoned ones)
  long long outside_writes = 0;  // floats outside the rows no longer carrying the poison
  bool pass = false;
  bool expect_fail = false;  // the broken variant: failing is the expected outcome
  bool diagnostic = false;   // reported only, never a gate
};

// Compare one kernel's output (the whole allocation, copied back) with the reference.
CheckResult check_output(const Case& c, const std::vector<float>& y_alloc,
                         const std::vector<double>& ref, const std::vector<double>& ref_sum) {
  CheckResult res;
  std::vector<char> inside(y_alloc.size(), 0);
  for (int r = 0; r < c.rows; ++r) {
    const size_t base = c.out_off + static_cast<size_t>(r) * c.ld;
    double sum = 0.0;
    for (int i = 0; i < c.width; ++i) {
      inside[base + i] = 1;
      const double v = y_alloc[base + i];
      if (!std::isfinite(v)) {
        ++res.nonfinite;
        res.max_abs_err = INFINITY;
      }
      const double err = std::fabs(v - ref[static_cast<size_t>(r) * c.width + i]);
      if (err > res.max_abs_err) res.max_abs_err = err;
      sum += v;
    }
    const double sum_err = std::isfinite(sum) ? std::fabs(sum - ref_sum[r]) : INFINITY;
    if (sum_err > res.max_row_sum_err) res.max_row_sum_err = sum_err;
  }
  for (size_t i = 0; i < y_alloc.size(); ++i) {
    if (inside[i]) continue;
    uint32_t bits;
    std::memcpy(&bits, &y_alloc[i], sizeof(bits));
    if (bits != kPoison) ++res.outside_writes;
  }
  // Written so that a NaN error compares false and fails.
  res.pass = res.max_abs_err <= kTol && res.max_row_sum_err <= kTol && res.nonfinite == 0 &&
             res.outside_writes == 0;
  return res;
}

// ------------------------------------------------------------------------------------------
// Device buffers of one case.

struct DeviceCase {
  Case c;
  size_t in_floats = 0, out_floats = 0;
  float* x = nullptr;  // allocation start
  float* y = nullptr;
  std::vector<float> host_x;
  std::vector<double> ref, ref_sum;

  const float* x_rows() const { return x + c.in_off; }
  float* y_rows() const { return y + c.out_off; }
};

size_t alloc_floats(int off, int rows, long long ld, int width) {
  return static_cast<size_t>(off) + static_cast<size_t>(rows - 1) * ld + width + kGuard;
}

DeviceCase upload(const Case& c, uint64_t seed) {
  DeviceCase d;
  d.c = c;
  d.in_floats = alloc_floats(c.in_off, c.rows, c.ld, c.width);
  d.out_floats = alloc_floats(c.out_off, c.rows, c.ld, c.width);
  // Everything outside the rows of the input is NaN too: a kernel that reads past its row
  // pulls a NaN into its statistics and fails the check.
  d.host_x.assign(d.in_floats, std::numeric_limits<float>::quiet_NaN());
  fill_input(c, seed, d.host_x);
  reference(c, d.host_x, d.ref, d.ref_sum);
  CUDA_CHECK(cudaMalloc(&d.x, d.in_floats * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&d.y, d.out_floats * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(d.x, d.host_x.data(), d.in_floats * sizeof(float),
                        cudaMemcpyHostToDevice));
  return d;
}

void release(DeviceCase& d) {
  CUDA_CHECK(cudaFree(d.x));
  CUDA_CHECK(cudaFree(d.y));
  d.x = d.y = nullptr;
}

CheckResult run_check(const Kernel& k, const DeviceCase& d) {
  // Poison the whole output allocation before every kernel: an element the kernel skips stays
  // NaN and fails; a write outside the rows changes the poison and fails.
  CUDA_CHECK(cudaMemset(d.y, 0xFF, d.out_floats * sizeof(float)));
  CUDA_CHECK(cudaDeviceSynchronize());
  launch(k, d.x_rows(), d.y_rows(), d.c.rows, d.c.width, d.c.ld);
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> y(d.out_floats);
  CUDA_CHECK(cudaMemcpy(y.data(), d.y, d.out_floats * sizeof(float), cudaMemcpyDeviceToHost));
  CheckResult r = check_output(d.c, y, d.ref, d.ref_sum);
  r.kernel = k.name;
  r.case_name = d.c.name;
  r.expect_fail = k.role == Role::kBroken;
  r.diagnostic = k.role == Role::kDiagnostic;
  return r;
}

std::vector<Case> build_cases(const Options& o) {
  std::vector<Case> cases;
  auto add = [&](int rows, int width, int in_off, int out_off, const char* why) {
    char name[160];
    std::snprintf(name, sizeof(name), "%dx%d in+%d out+%d masked (%s)", rows, width, in_off,
                  out_off, why);
    cases.push_back({name, rows, width, width, in_off, out_off, true, false});
  };
  // Small widths reach every head/body/tail split of softmax_online; offsets 1-3 misalign rows.
  add(3, 1, 1, 1, "width 1: head only");
  add(37, 3, 2, 2, "width 3: head and tail, no body");
  add(41, 7, 3, 3, "width 7: every row a different alignment");
  add(29, 13, 1, 0, "input and output alignments differ: scalar-store fallback");
  add(16, 300, 0, 0, "fewer float4 vectors than threads");
  add(8, 1027, 1, 1, "odd width, misaligned rows");
  if (!o.quick) {
    add(1024, 1024, 0, 0, "the issue's square shape");
    add(512, 8192, 0, 0, "width 8192: the serial sum needs compensation");
    add(1000, 4099, 1, 1, "odd width, rows not 16-byte aligned");
    add(200, 4099, 3, 2, "odd width, input and output alignments differ");
  }
  char name[160];
  std::snprintf(name, sizeof(name), "%dx%d ld %lld in+%d out+%d random (timed input)", o.rows,
                o.width, o.ld, o.offset, o.offset);
  cases.push_back({name, o.rows, o.width, o.ld, o.offset, o.offset, false, true});
  return cases;
}

// ------------------------------------------------------------------------------------------
// Timing.

struct Stats {
  double median = 0, p10 = 0, p90 = 0, min = 0, max = 0, mean = 0;
};

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return NAN;
  const double pos = p * (sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

Stats stats_of(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.median = percentile(v, 0.5);
  s.p10 = percentile(v, 0.1);
  s.p90 = percentile(v, 0.9);
  s.min = v.front();
  s.max = v.back();
  double t = 0;
  for (double x : v) t += x;
  s.mean = t / v.size();
  return s;
}

struct Timing {
  double warmup_ms_actual = 0;
  int warmup_launches = 0;
  double pad_us_measured = 0;
  int pad_iters = 0;
  std::vector<std::vector<double>> samples_us;  // per kernel, per launch
  std::vector<double> round_gap_us;  // GPU time in a round not inside any sample
};

// Time gpu_burn<<<1, 32>>>(iters) once with events, in microseconds.
double time_burn(float* sink, int iters) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  CUDA_CHECK(cudaEventRecord(a));
  wg::gpu_burn<<<1, 32>>>(sink, iters);
  LAUNCH_CHECK();
  CUDA_CHECK(cudaEventRecord(b));
  CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  return ms * 1e3;
}

Timing time_kernels(const Options& o, const DeviceCase& d, int sm_count) {
  Timing t;
  float* sink = nullptr;
  CUDA_CHECK(cudaMalloc(&sink, 1024 * sizeof(float)));

  // 1. Compute warm-up: an idle GPU runs at low clocks; keep every SM busy with FMAs for
  //    warmup_ms of wall time before the first sample.
  const auto t0 = std::chrono::steady_clock::now();
  double elapsed_ms = 0;
  while (elapsed_ms < o.warmup_ms) {
    wg::gpu_burn<<<sm_count * 8, 256>>>(sink, 1 << 14);
    LAUNCH_CHECK();
    CUDA_CHECK(cudaDeviceSynchronize());
    ++t.warmup_launches;
    elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                     .count();
  }
  t.warmup_ms_actual = elapsed_ms;

  // 2. The pad: a one-block burn long enough that the host enqueues a whole round while the
  //    GPU is still busy, so no sample includes host launch latency.
  if (o.pad_us > 0) {
    const int probe = 1 << 14;
    std::vector<double> probes;
    for (int i = 0; i < 3; ++i) probes.push_back(time_burn(sink, probe));
    const double us = stats_of(probes).median;
    t.pad_iters = std::max(1, static_cast<int>(probe * o.pad_us / std::max(us, 1e-3)));
    t.pad_us_measured = time_burn(sink, t.pad_iters);
  }

  // 3. Rounds: pad, then every kernel once in rotating order (round r starts at kernel
  //    r % K), each sample bracketed by its own event pair.
  const int K = kNumKernels;
  std::vector<cudaEvent_t> start(K), stop(K);
  cudaEvent_t pad_end;
  for (int k = 0; k < K; ++k) {
    CUDA_CHECK(cudaEventCreate(&start[k]));
    CUDA_CHECK(cudaEventCreate(&stop[k]));
  }
  CUDA_CHECK(cudaEventCreate(&pad_end));
  t.samples_us.assign(K, {});
  for (int r = 0; r < o.rounds; ++r) {
    if (t.pad_iters > 0) {
      wg::gpu_burn<<<1, 32>>>(sink, t.pad_iters);
      LAUNCH_CHECK();
    }
    CUDA_CHECK(cudaEventRecord(pad_end));
    int last = -1;
    for (int j = 0; j < K; ++j) {
      const int k = (r + j) % K;
      CUDA_CHECK(cudaEventRecord(start[k]));
      for (int i = 0; i < o.inner; ++i)
        launch(kKernels[k], d.x_rows(), d.y_rows(), d.c.rows, d.c.width, d.c.ld);
      CUDA_CHECK(cudaEventRecord(stop[k]));
      last = k;
    }
    CUDA_CHECK(cudaEventSynchronize(stop[last]));
    double in_samples = 0;
    for (int k = 0; k < K; ++k) {
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, start[k], stop[k]));
      t.samples_us[k].push_back(ms * 1e3 / o.inner);
      in_samples += ms * 1e3;
    }
    float round_ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&round_ms, pad_end, stop[last]));
    t.round_gap_us.push_back(std::max(0.0, round_ms * 1e3 - in_samples));
  }
  for (int k = 0; k < K; ++k) {
    CUDA_CHECK(cudaEventDestroy(start[k]));
    CUDA_CHECK(cudaEventDestroy(stop[k]));
  }
  CUDA_CHECK(cudaEventDestroy(pad_end));
  CUDA_CHECK(cudaFree(sink));
  return t;
}

// ------------------------------------------------------------------------------------------
// JSON output (hand-written: a flat document of numbers, strings, lists).

std::string jstr(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const unsigned char u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", u);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string jnum(double v) {
  if (!std::isfinite(v)) return "null";  // JSON has no NaN/inf
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

std::string jbool(bool b) { return b ? "true" : "false"; }

std::string jlist(const std::vector<double>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + jnum(v[i]);
  return out + "]";
}

std::string stats_json(const Stats& s, const std::string& indent) {
  return indent + "\"median_us\": " + jnum(s.median) + ",\n" + indent + "\"p10_us\": " +
         jnum(s.p10) + ",\n" + indent + "\"p90_us\": " + jnum(s.p90) + ",\n" + indent +
         "\"min_us\": " + jnum(s.min) + ",\n" + indent + "\"max_us\": " + jnum(s.max) + ",\n" +
         indent + "\"mean_us\": " + jnum(s.mean);
}

struct DeviceInfo {
  std::string name, pci_bus_id;
  int sm_count = 0, cc_major = 0, cc_minor = 0, clock_khz = 0, mem_clock_khz = 0,
      mem_bus_bits = 0, l2_bytes = 0, driver = 0, runtime = 0;
  size_t total_mem = 0;
};

DeviceInfo query_device(int dev) {
  DeviceInfo info;
  cudaDeviceProp p;
  CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  info.name = p.name;
  info.sm_count = p.multiProcessorCount;
  info.cc_major = p.major;
  info.cc_minor = p.minor;
  info.l2_bytes = p.l2CacheSize;
  info.total_mem = p.totalGlobalMem;
  CUDA_CHECK(cudaDeviceGetAttribute(&info.clock_khz, cudaDevAttrClockRate, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&info.mem_clock_khz, cudaDevAttrMemoryClockRate, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&info.mem_bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev));
  CUDA_CHECK(cudaDriverGetVersion(&info.driver));
  CUDA_CHECK(cudaRuntimeGetVersion(&info.runtime));
  char bus[64] = {0};
  CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), dev));
  info.pci_bus_id = bus;
  return info;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string build_json(int argc, char** argv, const Options& o, const DeviceInfo& dev,
                       const std::vector<CheckResult>& checks, bool checks_ok,
                       const Timing* timing, bool self_check_ok) {
  std::string j = "{\n";
  j += "  \"schema\": \"warpgauge.cuda_softmax.run/1\",\n";
  j += "  \"created_utc\": " + jstr(utc_now()) + ",\n";
  j += "  \"argv\": [";
  for (int i = 0; i < argc; ++i) j += (i ? ", " : "") + jstr(argv[i]);
  j += "],\n";
  j += "  \"mode\": " + jstr(o.self_check ? "self-check" : "timing") + ",\n";
  j += "  \"device\": {\"index\": " + std::to_string(o.device) + ", \"name\": " + jstr(dev.name) +
       ", \"pci_bus_id\": " + jstr(dev.pci_bus_id) + ", \"compute_capability\": " +
       jstr(std::to_string(dev.cc_major) + "." + std::to_string(dev.cc_minor)) +
       ", \"sm_count\": " + std::to_string(dev.sm_count) +
       ", \"clock_khz\": " + std::to_string(dev.clock_khz) +
       ", \"memory_clock_khz\": " + std::to_string(dev.mem_clock_khz) +
       ", \"memory_bus_bits\": " + std::to_string(dev.mem_bus_bits) +
       ", \"l2_bytes\": " + std::to_string(dev.l2_bytes) +
       ", \"total_memory_bytes\": " + std::to_string(dev.total_mem) +
       ", \"driver_version\": " + std::to_string(dev.driver) +
       ", \"runtime_version\": " + std::to_string(dev.runtime) + "},\n";
  j += "  \"shape\": {\"rows\": " + std::to_string(o.rows) + ", \"width\": " +
       std::to_string(o.width) + ", \"ld\": " + std::to_string(o.ld) +
       ", \"offset_floats\": " + std::to_string(o.offset) + ", \"dtype\": \"float32\"},\n";
  j += "  \"correctness\": {\n    \"tolerance\": " + jnum(kTol) +
       ",\n    \"reference\": \"float64 on the host\",\n    \"all_pass\": " + jbool(checks_ok) +
       ",\n    \"results\": [\n";
  for (size_t i = 0; i < checks.size(); ++i) {
    const CheckResult& c = checks[i];
    j += "      {\"kernel\": " + jstr(c.kernel) + ", \"case\": " + jstr(c.case_name) +
         ", \"pass\": " + jbool(c.pass) + ", \"expect_fail\": " + jbool(c.expect_fail) +
         ", \"diagnostic\": " + jbool(c.diagnostic) +
         ", \"max_abs_err\": " + jnum(c.max_abs_err) +
         ", \"max_row_sum_err\": " + jnum(c.max_row_sum_err) +
         ", \"nonfinite\": " + std::to_string(c.nonfinite) +
         ", \"outside_writes\": " + std::to_string(c.outside_writes) + "}" +
         (i + 1 < checks.size() ? ",\n" : "\n");
  }
  j += "    ]\n  },\n";
  if (o.self_check) {
    j += "  \"self_check\": {\"broken_kernel\": " + jstr(kBrokenKernel.name) +
         ", \"ok\": " + jbool(self_check_ok) + "},\n";
  }
  if (timing) {
    const Timing& t = *timing;
    const double elems = static_cast<double>(o.rows) * o.width;
    const Stats gap = stats_of(t.round_gap_us);
    j += "  \"timing\": {\n";
    j += "    \"method\": \"CUDA events around each sample; kernels in rotating order, one "
         "sample per kernel per round; a GPU busy pad before each round\",\n";
    j += "    \"l2\": \"warm: inputs stay in L2 between samples (no flush)\",\n";
    j += "    \"unit\": \"us per launch\",\n";
    j += "    \"rounds\": " + std::to_string(o.rounds) + ", \"inner\": " +
         std::to_string(o.inner) + ",\n";
    j += "    \"warmup_ms_target\": " + jnum(o.warmup_ms) + ", \"warmup_ms_actual\": " +
         jnum(t.warmup_ms_actual) + ", \"warmup_launches\": " +
         std::to_string(t.warmup_launches) + ",\n";
    j += "    \"pad_us_target\": " + jnum(o.pad_us) + ", \"pad_us_measured\": " +
         jnum(t.pad_us_measured) + ", \"pad_iters\": " + std::to_string(t.pad_iters) + ",\n";
    j += "    \"round_gap_us\": {\"median\": " + jnum(gap.median) + ", \"max\": " +
         jnum(gap.max) + "},\n";
    j += "    \"bytes_compulsory\": " + jnum(8.0 * elems) + "\n  },\n";
    j += "  \"kernels\": [\n";
    for (int k = 0; k < kNumKernels; ++k) {
      const Kernel& kk = kKernels[k];
      const Stats s = stats_of(t.samples_us[k]);
      const double bytes = 4.0 * elems * (kk.reads + 1);
      j += "    {\n      \"name\": " + jstr(kk.name) + ",\n      \"what\": " + jstr(kk.what) +
           ",\n";
      j += "      \"grid\": " + std::to_string(grid_for(kk, o.rows).x) + ", \"block\": " +
           std::to_string(block_for(kk).x) + ",\n";
      j += "      \"bytes_requested\": " + jnum(bytes) + ",\n";
      j += "      \"tbps_requested\": " + jnum(bytes / (s.median * 1e-6) / 1e12) + ",\n";
      j += "      \"tbps_compulsory\": " + jnum(8.0 * elems / (s.median * 1e-6) / 1e12) + ",\n";
      j += "      \"n\": " + std::to_string(t.samples_us[k].size()) + ",\n";
      j += stats_json(s, "      ") + ",\n";
      j += "      \"samples_us\": " + jlist(t.samples_us[k]) + "\n    }" +
           (k + 1 < kNumKernels ? ",\n" : "\n");
    }
    j += "  ],\n";
  } else {
    j += "  \"timing\": null,\n  \"kernels\": [],\n";
  }
  j += "  \"ok\": " + jbool(o.self_check ? self_check_ok : checks_ok) + "\n}\n";
  return j;
}

void write_json(const Options& o, const std::string& doc) {
  if (!o.json_path) {
    std::fwrite(doc.data(), 1, doc.size(), stdout);
    return;
  }
  const std::string tmp = std::string(o.json_path) + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) usage_error("cannot write %s: %s", tmp.c_str(), std::strerror(errno));
  const bool ok = std::fwrite(doc.data(), 1, doc.size(), f) == doc.size();
  if (std::fclose(f) != 0 || !ok || std::rename(tmp.c_str(), o.json_path) != 0)
    usage_error("cannot write %s: %s", o.json_path, std::strerror(errno));
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_args(argc, argv);
  CUDA_CHECK(cudaSetDevice(o.device));
  const DeviceInfo dev = query_device(o.device);
  std::fprintf(stderr, "device %d: %s, sm_%d%d, %d SMs, clock %d MHz\n", o.device,
               dev.name.c_str(), dev.cc_major, dev.cc_minor, dev.sm_count,
               dev.clock_khz / 1000);

  // Correctness first: every kernel, every case, poisoned output.
  std::vector<const Kernel*> under_test;
  for (const Kernel& k : kKernels) under_test.push_back(&k);
  under_test.push_back(&kDiagnosticKernel);
  if (o.self_check) under_test.push_back(&kBrokenKernel);

  std::vector<CheckResult> checks;
  bool real_ok = true, broken_caught = false;
  DeviceCase timed{};
  for (const Case& c : build_cases(o)) {
    DeviceCase d = upload(c, o.seed);
    for (const Kernel* k : under_test) {
      CheckResult r = run_check(*k, d);
      const char* verdict = r.pass ? "pass" : "FAIL";
      const char* note = "";
      if (k->role == Role::kBroken) {
        broken_caught = broken_caught || !r.pass;
        note = "  (broken on purpose: must fail)";
      } else if (k->role == Role::kDiagnostic) {
        verdict = "info";
        note = "  (diagnostic, not a gate)";
      } else {
        real_ok = real_ok && r.pass;
      }
      std::fprintf(stderr, "  %-4s %-28s %-72s max|err| %.3g  max|rowsum err| %.3g%s\n", verdict,
                   k->name, c.name.c_str(), r.max_abs_err, r.max_row_sum_err, note);
      checks.push_back(r);
    }
    if (c.timed) timed = d;
    else release(d);
  }
  const bool self_check_ok = real_ok && broken_caught;
  if (o.self_check) {
    std::fprintf(stderr, "self-check: real kernels %s; %s %s\n",
                 real_ok ? "pass" : "FAIL", kBrokenKernel.name,
                 broken_caught ? "caught (fails as it must)" : "NOT caught: the checks are blind");
    std::fprintf(stderr, "self-check %s\n", self_check_ok ? "OK" : "FAILED");
    write_json(o, build_json(argc, argv, o, dev, checks, real_ok, nullptr, self_check_ok));
    release(timed);
    return self_check_ok ? 0 : 1;
  }
  if (!real_ok) {
    std::fprintf(stderr, "correctness FAILED: not timing\n");
    write_json(o, build_json(argc, argv, o, dev, checks, real_ok, nullptr, false));
    release(timed);
    return 1;
  }

  const Timing t = time_kernels(o, timed, dev.sm_count);
  release(timed);
  std::fprintf(stderr,
               "timing %dx%d (ld %lld, offset %d): %d rounds, warm-up %.0f ms, pad %.0f us, "
               "median round gap %.2f us\n",
               o.rows, o.width, o.ld, o.offset, o.rounds, t.warmup_ms_actual, t.pad_us_measured,
               stats_of(t.round_gap_us).median);
  for (int k = 0; k < kNumKernels; ++k) {
    const Stats s = stats_of(t.samples_us[k]);
    std::fprintf(stderr, "  %-22s median %10.3f us  p10 %10.3f  p90 %10.3f\n", kKernels[k].name,
                 s.median, s.p10, s.p90);
  }
  write_json(o, build_json(argc, argv, o, dev, checks, real_ok, &t, true));
  CUDA_CHECK(cudaDeviceSynchronize());
  return 0;
}
