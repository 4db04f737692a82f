// bench/cuda_bench.cpp - times spattn's CUDA kernels on the benchmark patterns
// and prints one JSON object per case (read by bench/gpu_peers.py).
//
//   spattn_cuda_bench --cases dense,causal,window,streaming,random,bigbird,dilated,mix,allblocks
//                     --seq 32768 --heads 16 --head-dim 128 [--batch 1] [--dtype bf16]
//                     [--q-len N] [--kv-heads N]
//                     [--block 128] [--kernel fused|sm80|sm90|naive] [--repeats 20] [--dump-dir DIR]
//                     [--varlen N] [--rest-ms 500] [--warmup-ms 0] [--timed-ms 0]
//                     [--pass forward|backward]
//
// Cases (bottom-right aligned, Lq = Lk = seq unless --q-len N takes the last
// N positions as queries, as a decoding step or a chunk of a prefill over
// cached keys does; --kv-heads N shares each kv head among heads / N query
// heads): dense; causal; window = causal
// sliding window of 4096 keys; streaming = 128 sinks + 4096 window; random =
// 10% of the 128-blocks (seeded) plus the block diagonal (random-causal: the
// same blocks, causal inside them); bigbird = BigBird
// (block 128, window 3, global 1, random 3, seed 0); dilated = dilated
// (segment 2048, rate 4, causal) united with a causal window of 512; mix =
// per-head mix, the first half of the heads causal (full attention), the
// rest streaming 128 + 4096 (DuoAttention's retrieval and streaming heads);
// allblocks = a custom block mask that keeps every block (density 1, to set
// against dense); blockdiag-N = block-diagonal with diagonal blocks of N
// tokens (rows of N / block kept blocks, all full: what a work unit of that
// many key tiles costs beside dense's); seed-streaming = streaming (16
// sinks, 64 window); seed-blockdiag = block-diagonal 16 (the custom-block
// cases random, random-causal, bigbird and allblocks need Lq = Lk). --dump-dir writes each block-level mask as
// <case>_blocks.u8 (rows x cols bytes, 1 = kept) so the peer script can give
// FlexAttention exactly the same blocks.
//
// --varlen N packs N sequences of seeded random lengths in [1, seq] (sequence
// 0 has length seq) into batch-1 tensors and times cuda_attention_varlen with
// one mask for length seq; kept pairs are summed over the sequences, each at
// its own length (--batch is ignored; the custom-block cases random,
// random-causal, bigbird and allblocks are rejected).
// --kernel: fused lets cuda_attention choose (SPATTN_CUDA_KERNEL, else the
// Hopper kernel where it runs); sm80 and sm90 force one fused kernel; naive is
// the one-thread-per-row baseline. The JSON names the kernel timed.
//
// Timing: each case starts after --rest-ms milliseconds with the card idle
// (default 500), then one untimed call, then calls of the same case for
// --warmup-ms milliseconds (default none), then CUDA events around each of
// --repeats calls, and more until the timed calls add up to --timed-ms
// (default none), the median reported ("host_ms": the median time the host
// spends inside one of those calls, its checks, plan lookups and launches;
// the events cover it too, so a call of little device work is bound by it).
// The card's clocks follow its power draw: an H100 under minutes-long dense
// load sits at its 700 W cap near 1300-1600 MHz against 1980 MHz in short
// bursts, and a case timed right after a heavy one inherits part of that
// (dev/notes/cuda-h100-clocks-and-warm-up.md). The rest makes each case's figure independent of the cases
// before it (the clock is back at 1980 MHz within about 100 ms of idling:
// the same note); a longer
// warm-up measures the sustained state instead. bench/gpu_peers.py runs this
// with --warmup-ms 25 --timed-ms 100, triton do_bench's defaults, and gives
// the peers the same rest before each do_bench.
// Effective TFLOP/s = 4 * kept_pairs * head_dim / time.
//
// --pass backward times the backward pass instead (cuda/bwd_sm80/): per case
// the forward runs once for its output and LSE, the backward plan is built
// and uploaded once ("plan_ms", host work plus copies), then each timed call
// is the whole backward on the plan (the delta kernel, the dK/dV and the dQ
// kernels) from a random output gradient, as the forward calls are timed.
// Effective TFLOP/s = 2.5 * 4 * kept_pairs * head_dim / time (the peer
// tables' convention). --kernel and --varlen do not apply; the JSON rows say
// "pass": "backward" and "kernel": "bwd_sm80".
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.hpp"
#include "bench_fill.hpp"
#include "cuda/bwd_sm80/bwd_sm80.hpp"
#include "spattn/cuda.hpp"
#include "spattn/spattn.hpp"

namespace spattn::bench {
namespace {

struct Options {
  std::vector<std::string> cases;
  int64_t seq = 32768, heads = 16, head_dim = 128, batch = 1, block = 128, repeats = 20, varlen = 0;
  int64_t q_len = 0, kv_heads = 0;  // --q-len, --kv-heads (default seq, heads)
  double rest_ms = 500, warmup_ms = 0, timed_ms = 0;
  DType dtype = DType::BF16;
  std::string kernel = "fused";
  std::string pass = "forward";
  std::string dump_dir;
};

Options parse(int argc, char** argv) {
  Options o;
  std::optional<int64_t> q_len, kv_heads;
  for (int n = 1; n < argc; ++n) {
    const std::string flag = argv[n];
    require(n + 1 < argc, flag, " needs a value");
    const std::string value = argv[++n];
    if (flag == "--cases") o.cases = split(value);
    else if (flag == "--seq") o.seq = std::stoll(value);
    else if (flag == "--heads") o.heads = std::stoll(value);
    else if (flag == "--q-len") q_len = std::stoll(value);
    else if (flag == "--kv-heads") kv_heads = std::stoll(value);
    else if (flag == "--head-dim") o.head_dim = std::stoll(value);
    else if (flag == "--batch") o.batch = std::stoll(value);
    else if (flag == "--block") o.block = std::stoll(value);
    else if (flag == "--repeats") o.repeats = std::stoll(value);
    else if (flag == "--dtype") o.dtype = parse_dtype(value, "--dtype");
    else if (flag == "--kernel") o.kernel = value;
    else if (flag == "--pass") o.pass = value;
    else if (flag == "--dump-dir") o.dump_dir = value;
    else if (flag == "--varlen") o.varlen = std::stoll(value);
    else if (flag == "--rest-ms") o.rest_ms = std::stod(value);
    else if (flag == "--warmup-ms") o.warmup_ms = std::stod(value);
    else if (flag == "--timed-ms") o.timed_ms = std::stod(value);
    else fail("unknown flag ", flag);
  }
  require(!o.cases.empty(), "--cases is required");
  o.q_len = q_len.value_or(o.seq);
  o.kv_heads = kv_heads.value_or(o.heads);
  require(o.q_len >= 1 && o.q_len <= o.seq, "--q-len must be in [1, --seq], got ", o.q_len);
  require(o.kv_heads >= 1 && o.heads % o.kv_heads == 0, "--kv-heads must divide --heads (", o.heads, "), got ",
          o.kv_heads);
  require(o.varlen == 0 || (o.q_len == o.seq && o.kv_heads == o.heads),
          "--q-len and --kv-heads take a regular batch (no --varlen)");
  require(o.rest_ms >= 0, "--rest-ms must be >= 0, got ", o.rest_ms);
  require(o.warmup_ms >= 0, "--warmup-ms must be >= 0, got ", o.warmup_ms);
  require(o.timed_ms >= 0, "--timed-ms must be >= 0, got ", o.timed_ms);
  require(o.repeats >= 1, "--repeats must be >= 1, got ", o.repeats);
  require(o.kernel == "fused" || o.kernel == "sm80" || o.kernel == "sm90" || o.kernel == "naive",
          "--kernel must be fused, sm80, sm90 or naive, got '", o.kernel, "'");
  require(o.pass == "forward" || o.pass == "backward", "--pass must be forward or backward, got '", o.pass, "'");
  require(o.pass == "forward" || (o.varlen == 0 && o.kernel != "naive"),
          "--pass backward takes a regular batch and a fused kernel (no --varlen, no --kernel naive)");
  return o;
}

// 10% of the blocks of an n x n grid (seeded) plus the diagonal, as a block matrix.
std::vector<uint8_t> random_blocks(int64_t n) {
  std::mt19937_64 rng(0);
  std::bernoulli_distribution keep(0.1);
  std::vector<uint8_t> blocks(static_cast<size_t>(n * n));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < n; ++c) blocks[r * n + c] = (r == c || keep(rng)) ? 1 : 0;
  return blocks;
}

Pattern make_pattern(const std::string& name, const Options& o) {
  const int64_t n = (o.seq + o.block - 1) / o.block;
  const bool blocks_of_square = name == "random" || name == "random-causal" || name == "bigbird" || name == "allblocks";
  require(!blocks_of_square || o.q_len == o.seq, "case '", name, "' needs --q-len equal to --seq (its blocks are ",
          n, " x ", n, "), got ", o.q_len);
  if (name == "dense") return Pattern::dense();
  if (name == "causal") return Pattern::causal();
  if (name == "window") return Pattern::sliding_window(4096);
  if (name == "streaming") return Pattern::streaming(128, 4096);
  if (name == "random") return Pattern::custom(random_blocks(n), 1, n, n, o.block, o.block);
  if (name == "random-causal") return Pattern::custom(random_blocks(n), 1, n, n, o.block, o.block, true);
  if (name == "bigbird") return Pattern::bigbird(o.seq, o.block, 3, 1, 3, 0);
  if (name == "dilated")
    return Pattern::unite(Pattern::dilated({2048}, {4}, true), Pattern::sliding_window(512));
  if (name == "mix") {
    std::vector<Pattern> heads;
    for (int64_t h = 0; h < o.heads; ++h)
      heads.push_back(2 * h < o.heads ? Pattern::causal() : Pattern::streaming(128, 4096));
    return Pattern::per_head(heads);
  }
  if (name == "allblocks")
    return Pattern::custom(std::vector<uint8_t>(static_cast<size_t>(n * n), 1), 1, n, n, o.block, o.block);
  // The two parts of "dilated", alone.
  if (name == "dilated-only") return Pattern::dilated({2048}, {4}, true);
  if (name == "window512") return Pattern::sliding_window(512);
  if (name == "seed-streaming") return Pattern::streaming(16, 64);
  if (name == "seed-blockdiag") return Pattern::block_diagonal(16);
  const std::string diag = "blockdiag-";
  if (name.rfind(diag, 0) == 0) {
    const std::string tokens = name.substr(diag.size());
    require(!tokens.empty() && tokens.find_first_not_of("0123456789") == std::string::npos && tokens.size() < 12,
            "case '", name, "': expected blockdiag-N with N the tokens of a diagonal block");
    const int64_t block = std::stoll(tokens);
    require(block > 0, "case '", name, "': the diagonal block must hold at least one token");
    return Pattern::block_diagonal(block);
  }
  fail("unknown case '", name, "'");
}

// Writes the kept blocks of mask head 0 (1 byte per block, row-major).
void dump_blocks(const BlockMask& mask, const std::string& path) {
  const BlockMaskView v = mask.view();
  std::vector<uint8_t> grid(static_cast<size_t>(v.num_q_blocks * v.num_k_blocks), 0);
  for (int64_t qb = 0; qb < v.num_q_blocks; ++qb)
    for (int64_t at = v.row_begin(qb); at < v.row_end(qb); ++at) grid[qb * v.num_k_blocks + v.kv_indices[at]] = 1;
  std::ofstream out(path, std::ios::binary);
  require(out.good(), "cannot write '", path, "'");
  out.write(reinterpret_cast<const char*>(grid.data()), static_cast<std::streamsize>(grid.size()));
}

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) { check(cudaMalloc(&ptr_, bytes), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

// Lengths of the --varlen batch: the first is seq, the others uniform in [1, seq].
std::vector<int64_t> varlen_lengths(const Options& o) {
  std::mt19937_64 rng(0);
  std::uniform_int_distribution<int64_t> length(1, o.seq);
  std::vector<int64_t> lengths = {o.seq};
  while (static_cast<int64_t>(lengths.size()) < o.varlen) lengths.push_back(length(rng));
  return lengths;
}

// The kernel that ran: the naive baseline, or the fused kernel the call chose
// (both passes of a dilated split and varlen batches run on it too).
const char* kernel_name(bool naive, bool sm90) {
  if (naive) return "naive";
  return sm90 ? "sm90" : "sm80";
}

// Median, fastest and the host's median share of calls of `call`, timed
// after the rest, the untimed call and the warm-up of the options.
struct Timing {
  double median_ms = 0, min_ms = 0, host_ms = 0;
  size_t calls = 0;
};

template <typename Call>
Timing time_calls(const Options& o, EventTimer& timer, const Call& call) {
  check(cudaDeviceSynchronize(), "rest");
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(o.rest_ms));
  call();  // uploads the naive kernel's mask, loads the module
  check(cudaDeviceSynchronize(), "warm-up");
  for (const auto w0 = std::chrono::steady_clock::now();
       std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count() < o.warmup_ms;) {
    call();
    check(cudaDeviceSynchronize(), "warm-up");
  }
  std::vector<float> times;
  std::vector<double> host_times;  // the host's share of each timed call: checks, plan lookups, launches
  double timed_total = 0;
  while (static_cast<int64_t>(times.size()) < o.repeats || timed_total < o.timed_ms) {
    times.push_back(timer.time_ms(nullptr, [&] {
      const auto h0 = std::chrono::steady_clock::now();
      call();
      host_times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - h0).count());
    }));
    timed_total += times.back();
  }
  std::sort(times.begin(), times.end());
  std::sort(host_times.begin(), host_times.end());
  return Timing{times[times.size() / 2], times.front(), host_times[host_times.size() / 2], times.size()};
}

// The tensors of the backward pass beside q, k, v, out and lse.
struct BackwardTensors {
  TensorView d_out, dq, dk, dv;
};

// The backward pass of one case (--pass backward): the forward once, the
// plan once, then run_backward timed; prints the case's JSON row.
void time_backward(const Options& o, const std::string& name, const BlockMask& mask, const TensorView& tq,
                   const TensorView& tk, const TensorView& tv, const TensorView& to, const TensorView& tl,
                   const BackwardTensors& g, double scale, int64_t kept, double density, double build_ms,
                   EventTimer& timer) {
  cuda_attention(tq, tk, tv, to, mask, scale, &tl);  // the output and LSE the backward reads
  // The call's plan with its backward lists, made before the timing.
  const auto t1 = std::chrono::steady_clock::now();
  PlanOptions plan_options;
  plan_options.device = cuda_pointer_device(tq.data);
  plan_options.backward = true;
  const Plan plan = make_plan(mask, call_shape(tq, tk), plan_options);
  const double plan_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  const AttentionGrads grads{g.dq, g.dk, g.dv};
  AttentionOptions options;
  options.scale = scale;
  const Timing t =
      time_calls(o, timer, [&] { attention_backward(tq, tk, tv, to, tl, g.d_out, grads, plan, options); });
  const double D = static_cast<double>(o.head_dim);
  const double tflops = 2.5 * 4.0 * static_cast<double>(kept) * D / (t.median_ms * 1e-3) / 1e12;
  std::printf(
      "{\"case\": \"%s\", \"pass\": \"backward\", \"kernel\": \"bwd_sm80\", \"batch\": %lld, \"heads\": %lld, "
      "\"kv_heads\": %lld, \"seq\": %lld, \"q_len\": %lld, \"head_dim\": %lld, \"dtype\": \"%s\", \"block\": %lld, "
      "\"kept_pairs\": %lld, \"density\": %.6f, \"time_ms\": %.4f, \"min_ms\": %.4f, \"host_ms\": %.4f, "
      "\"tflops\": %.2f, \"mask_build_ms\": %.2f, \"plan_ms\": %.2f, \"blocks\": %lld, \"full_blocks\": %lld, "
      "\"rest_ms\": %.0f, \"warmup_ms\": %.0f, \"timed_calls\": %zu}\n",
      name.c_str(), static_cast<long long>(tq.batch()), static_cast<long long>(tq.heads()),
      static_cast<long long>(tk.heads()), static_cast<long long>(tk.seq_len()), static_cast<long long>(tq.seq_len()),
      static_cast<long long>(o.head_dim), dtype_name(o.dtype), static_cast<long long>(o.block),
      static_cast<long long>(kept), density, t.median_ms, t.min_ms, t.host_ms, tflops, build_ms, plan_ms,
      static_cast<long long>(mask.num_blocks()), static_cast<long long>(mask.num_full_blocks()), o.rest_ms,
      o.warmup_ms, t.calls);
  std::fflush(stdout);
}

void run(const Options& o) {
  const std::vector<int64_t> lengths = o.varlen > 0 ? varlen_lengths(o) : std::vector<int64_t>{};
  std::vector<int32_t> cu_host = {0};
  for (int64_t len : lengths) cu_host.push_back(static_cast<int32_t>(cu_host.back() + len));
  // A varlen batch is one batch element of all the sequences' rows.
  const int64_t B = o.varlen > 0 ? 1 : o.batch, H = o.heads, Hkv = o.kv_heads;
  const int64_t L = o.varlen > 0 ? cu_host.back() : o.seq, Lq = o.varlen > 0 ? L : o.q_len;
  const int64_t D = o.head_dim;
  const int64_t n_q = B * H * Lq * D, n_kv = B * Hkv * L * D;
  const bool bf16 = o.dtype == DType::BF16;
  DeviceBuffer q(n_q * 2), k(n_kv * 2), v(n_kv * 2), out(n_q * 2);
  DeviceBuffer lse(static_cast<size_t>(B * H * Lq) * sizeof(float));
  fill_random(q.get(), n_q, bf16, 1);
  fill_random(k.get(), n_kv, bf16, 2);
  fill_random(v.get(), n_kv, bf16, 3);
  const auto view = [&](const DeviceBuffer& buffer, int64_t heads, int64_t rows) {
    return o.varlen > 0 ? make_blhd(buffer.get(), o.dtype, 1, rows, heads, D)
                        : make_bhld(buffer.get(), o.dtype, B, heads, rows, D);
  };
  const TensorView tq = view(q, H, Lq), tk = view(k, Hkv, L), tv = view(v, Hkv, L), to = view(out, H, Lq);
  DeviceBuffer cu(cu_host.size() * sizeof(int32_t));
  check(cudaMemcpy(cu.get(), cu_host.data(), cu_host.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
        "cudaMemcpy cu_seqlens");
  VarlenBatch batch;
  batch.cu_seqlens_q = batch.cu_seqlens_k = static_cast<const int32_t*>(cu.get());
  batch.num_seqs = o.varlen;
  batch.max_seqlen_q = batch.max_seqlen_k = o.seq;
  const TensorView tl = make_lse(static_cast<float*>(lse.get()), B, H, Lq);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  // The backward pass's output gradient (random) and gradients.
  const bool backward = o.pass == "backward";
  const int64_t n_g = backward ? 1 : 0;
  DeviceBuffer d_out(n_g * n_q * 2), dq(n_g * n_q * 2), dk(n_g * n_kv * 2), dv(n_g * n_kv * 2);
  if (backward) fill_random(d_out.get(), n_q, bf16, 4);
  const BackwardTensors grads{view(d_out, H, Lq), view(dq, H, Lq), view(dk, Hkv, L), view(dv, Hkv, L)};
  const bool naive = o.kernel == "naive";
  if (o.kernel == "sm80") cuda_set_kernel(CudaKernel::Sm80);
  if (o.kernel == "sm90") cuda_set_kernel(CudaKernel::Sm90);
  const bool sm90 = !naive && cuda_kernel() != CudaKernel::Sm80 && cuda_sm90_kernel_available();
  EventTimer timer;

  for (const std::string& name : o.cases) {
    const Pattern pattern = make_pattern(name, o);
    const auto t0 = std::chrono::steady_clock::now();
    const BlockMask mask = o.varlen > 0 ? varlen_mask(pattern, o.seq, o.block, o.block, H)
                                        : BlockMask::build(pattern, MaskShape{Lq, L, o.block, o.block, H});
    const double build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!o.dump_dir.empty()) dump_blocks(mask, o.dump_dir + "/" + name + "_blocks.u8");
    // A varlen batch: pairs kept by each sequence at its own length, over all its pairs.
    int64_t kept = 0, pairs = 0;
    for (int64_t len : lengths) {
      kept += BlockMask::build(pattern, MaskShape{len, len, o.block, o.block, H}).kept_pairs(H);
      pairs += H * len * len;
    }
    if (o.varlen == 0) kept = mask.kept_pairs(H) * B;
    const double density = o.varlen > 0 ? static_cast<double>(kept) / static_cast<double>(pairs) : mask.density(H);
    if (backward) {
      time_backward(o, name, mask, tq, tk, tv, to, tl, grads, scale, kept, density, build_ms, timer);
      continue;
    }
    // The call's plan (kernel, tile, splits, uploads): host work plus copies.
    const auto t1 = std::chrono::steady_clock::now();
    PlanOptions plan_options;
    plan_options.device = cuda_pointer_device(tq.data);
    const Plan plan = naive ? Plan()
                            : make_plan(mask, o.varlen > 0 ? varlen_call_shape(tq, tk, batch, mask.q_len())
                                                           : call_shape(tq, tk),
                                        plan_options);
    const double prepare_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
    AttentionOptions options;
    options.scale = scale;
    auto call = [&] {
      if (naive)
        cuda_naive_attention(tq, tk, tv, to, mask, scale, &tl);
      else if (o.varlen > 0)
        attention_varlen(tq, tk, tv, to, batch, plan, options, &tl);
      else
        attention(tq, tk, tv, to, plan, options, &tl);
    };
    const Timing t = time_calls(o, timer, call);
    const double median_ms = t.median_ms;
    const double tflops = 4.0 * static_cast<double>(kept) * static_cast<double>(D) / (median_ms * 1e-3) / 1e12;
    std::printf(
        "{\"case\": \"%s\", \"pass\": \"forward\", \"kernel\": \"%s\", \"batch\": %lld, \"heads\": %lld, \"kv_heads\": %lld, "
        "\"seq\": %lld, \"q_len\": %lld, \"head_dim\": %lld, "
        "\"dtype\": \"%s\", \"block\": %lld, \"kept_pairs\": %lld, \"density\": %.6f, \"time_ms\": %.4f, "
        "\"min_ms\": %.4f, \"host_ms\": %.4f, \"tflops\": %.2f, \"mask_build_ms\": %.2f, \"prepare_ms\": %.2f, \"blocks\": %lld, \"full_blocks\": %lld, "
        "\"varlen_seqs\": %lld, \"rest_ms\": %.0f, \"warmup_ms\": %.0f, \"timed_calls\": %zu}\n",
        name.c_str(), kernel_name(naive, sm90), static_cast<long long>(B),
        static_cast<long long>(H), static_cast<long long>(Hkv),
        static_cast<long long>(L), static_cast<long long>(Lq), static_cast<long long>(D), dtype_name(o.dtype), static_cast<long long>(o.block),
        static_cast<long long>(kept), density, median_ms, t.min_ms, t.host_ms, tflops, build_ms, prepare_ms,
        static_cast<long long>(mask.num_blocks()), static_cast<long long>(mask.num_full_blocks()),
        static_cast<long long>(o.varlen), o.rest_ms, o.warmup_ms, t.calls);
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace spattn::bench

int main(int argc, char** argv) {
  return spattn::bench::run_program("spattn_cuda_bench",
                                    [&] { spattn::bench::run(spattn::bench::parse(argc, argv)); });
}
