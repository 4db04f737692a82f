// dist/cp_attention.cpp - context-parallel attention (spattn/dist_attention.hpp)
// on a RankPlan: the forward (pack, exchange stage by stage with two stages in
// flight, attend, merge by LSE) and the backward (the same exchange, per-call
// gradients under the merged LSE, each stage's received rows' gradients back
// to their owner as soon as the stage's calls are done).
#include <algorithm>
#include <memory>

#include "dist/cp_tensor_ops.hpp"
#include "spattn/dist_attention.hpp"
#include "spattn/error.hpp"

namespace spattn::dist {

namespace {

// An owned contiguous (B, H, L, D) buffer (two of them for a K/V message),
// on the host or the device.
struct Buffer {
  std::shared_ptr<void> memory;
  TensorView view;  // the first (B, H, L, D) block

  static Buffer make(DType dtype, int64_t B, int64_t H, int64_t L, int64_t D, bool device, int64_t parts = 1) {
    Buffer b;
    b.memory = detail::allocate(parts * B * H * L * D * dtype_size(dtype), device);
    b.view = make_bhld(b.memory.get(), dtype, B, H, L, D);
    return b;
  }
  // Part `i` of a buffer of several (K = 0, V = 1 of a message).
  TensorView part(int64_t i) const { return rows_part(view.shape[2], i); }
  // The buffer's memory seen as `rows` rows (at most its own): part `i` and all parts' bytes.
  TensorView rows_part(int64_t rows, int64_t i) const {
    TensorView t = make_bhld(memory.get(), view.dtype, view.shape[0], view.shape[1], rows, view.shape[3]);
    t.data = static_cast<unsigned char*>(memory.get()) + i * t.numel() * dtype_size(view.dtype);
    return t;
  }
  int64_t rows_bytes(int64_t rows, int64_t parts) const {
    return parts * view.shape[0] * view.shape[1] * rows * view.shape[3] * dtype_size(view.dtype);
  }
};

void check_rank_tensor(const TensorView& t, const char* name, int64_t B, int64_t H, int64_t L, int64_t D) {
  require(t.shape[0] == B && t.shape[1] == H && t.shape[2] == L && t.shape[3] == D, "context parallelism: ", name,
          " must be (", B, ", ", H, ", ", L, ", ", D, "), got (", t.shape[0], ", ", t.shape[1], ", ", t.shape[2], ", ",
          t.shape[3], ")");
}

// The shapes every pass checks: q, k, v against the plan, and where they lie.
struct RankShape {
  int64_t B, Hq, Hkv, L, D;
  bool device;
};

// A tensor besides q: its shape, and that it lies where q does.
void check_rank_tensor(const TensorView& t, const char* name, const RankShape& s, int64_t H, int64_t D) {
  check_rank_tensor(t, name, s.B, H, s.L, D);
  require(t.empty() || detail::on_device(t.data) == s.device, "context parallelism: ", name, " must lie in ",
          s.device ? "device" : "host", " memory, like q");
}

// An LSE or its gradient: fp32 (B, Hq, L_rank), where q lies.
void check_rank_lse(const TensorView& t, const char* name, const RankShape& s) {
  check_rank_tensor(t, name, s, s.Hq, 1);
  require(t.dtype == DType::F32, "context parallelism: ", name, " must be fp32, got ", dtype_name(t.dtype));
}

RankShape check_inputs(const TensorView& q, const TensorView& k, const TensorView& v, const RankPlan& plan,
                       const Transport& transport) {
  require(transport.world_size() == plan.layout().world_size() && transport.rank() == plan.rank(),
          "context parallelism: the transport is rank ", transport.rank(), " of ", transport.world_size(),
          ", the plan rank ", plan.rank(), " of ", plan.layout().world_size());
  RankShape s{q.shape[0], q.shape[1], k.shape[1], plan.local_len(), q.shape[3], detail::on_device(q.data)};
  require(s.Hq == plan.num_heads(), "context parallelism: q has ", s.Hq, " heads, the plan was made for ",
          plan.num_heads());
  require(s.Hkv >= 1 && s.Hq % s.Hkv == 0, "context parallelism: k has ", s.Hkv, " heads, which must divide q's ",
          s.Hq);
  check_rank_tensor(q, "q", s.B, s.Hq, s.L, s.D);
  check_rank_tensor(k, "k", s, s.Hkv, s.D);
  check_rank_tensor(v, "v", s, s.Hkv, s.D);
  require(k.dtype == q.dtype && v.dtype == q.dtype, "context parallelism: q, k and v must share one dtype");
  return s;
}

// The K/V rows of the exchange stages, two in flight: stage d's rows for
// stage_to(d) are packed into, and those from stage_from(d) arrive in, slot
// d % 2; end(d) waits for the stage and starts stage d + 2 in its slot.
class KvStages {
 public:
  KvStages(const TensorView& k, const TensorView& v, const RankShape& s, const RankPlan& plan, Transport& transport,
           void* stream)
      : k_(k), v_(v), plan_(plan), transport_(transport), stream_(stream) {
    for (int slot = 0; slot < 2; ++slot) {
      out_[slot] = Buffer::make(k.dtype, s.B, s.Hkv, plan.max_rows_to(), s.D, s.device, 2);
      in_[slot] = Buffer::make(k.dtype, s.B, s.Hkv, plan.max_rows_from(), s.D, s.device, 2);
    }
    start(1);
    start(2);
  }

  // The keys (part 0) or values (part 1) of `call`, once they may be read.
  TensorView rows(const RankPlan::Call& call, const TensorView& own, int64_t part) {
    const CallSpec& c = call.spec;
    if (call.stage == 0) return seq_slice(own, c.k_offset, c.k_len);
    pending_[call.stage % 2]->wait(c.peer);
    return seq_slice(in_[call.stage % 2].rows_part(plan_.rows_from(c.peer), part), c.k_offset, c.k_len);
  }

  void end(int64_t d) {
    pending_[d % 2]->finish();
    pending_[d % 2].reset();
    start(d + 2);
  }

 private:
  void start(int64_t d) {
    if (d > plan_.num_stages()) return;
    const int64_t to = plan_.stage_to(d), from = plan_.stage_from(d), slot = d % 2;
    const Buffer& o = out_[slot];
    const int64_t n_to = plan_.rows_to(to), n_from = plan_.rows_from(from);
    for (const KeyRun& run : plan_.sends(to)) {
      detail::convert(seq_slice(o.rows_part(n_to, 0), run.offset, run.length), seq_slice(k_, run.source, run.length),
                      stream_);
      detail::convert(seq_slice(o.rows_part(n_to, 1), run.offset, run.length), seq_slice(v_, run.source, run.length),
                      stream_);
    }
    pending_[slot] = transport_.start({Message{to, o.memory.get(), o.rows_bytes(n_to, 2)}},
                                      {Message{from, in_[slot].memory.get(), in_[slot].rows_bytes(n_from, 2)}}, stream_);
  }

  TensorView k_, v_;
  const RankPlan& plan_;
  Transport& transport_;
  void* stream_;
  Buffer out_[2], in_[2];
  std::unique_ptr<Exchange> pending_[2];
};

// The gradients of each stage's received rows (fp32, slot d % 2), sent back
// to their owner (stage_from(d)) once the stage's calls are done, while this
// rank receives those of the rows it sent at stage d (from stage_to(d)).
class GradReturns {
 public:
  GradReturns(DType dtype, const RankShape& s, const RankPlan& plan, Transport& transport, void* stream)
      : plan_(plan), transport_(transport), stream_(stream) {
    for (int slot = 0; slot < 2; ++slot) {
      sums_[slot] = Buffer::make(DType::F32, s.B, s.Hkv, plan.max_rows_from(), s.D, s.device, 2);
      out_[slot] = Buffer::make(dtype, s.B, s.Hkv, plan.max_rows_from(), s.D, s.device, 2);
      in_[slot] = Buffer::make(dtype, s.B, s.Hkv, plan.max_rows_to(), s.D, s.device, 2);
    }
  }

  // Stage d's sums of dK (part 0) and dV (part 1), zeroed by begin(d).
  TensorView sums(int64_t d, int64_t part) const {
    return sums_[d % 2].rows_part(plan_.rows_from(plan_.stage_from(d)), part);
  }
  void begin(int64_t d) {
    detail::fill(sums(d, 0), 0.0, stream_);
    detail::fill(sums(d, 1), 0.0, stream_);
  }
  // Sends stage d's sums (in the inputs' dtype) and starts receiving its returns.
  void send(int64_t d) {
    const int64_t from = plan_.stage_from(d), to = plan_.stage_to(d), slot = d % 2;
    const int64_t n_from = plan_.rows_from(from), n_to = plan_.rows_to(to);
    detail::convert(out_[slot].rows_part(n_from, 0), sums(d, 0), stream_);
    detail::convert(out_[slot].rows_part(n_from, 1), sums(d, 1), stream_);
    pending_[slot] = transport_.start({Message{from, out_[slot].memory.get(), out_[slot].rows_bytes(n_from, 2)}},
                                      {Message{to, in_[slot].memory.get(), in_[slot].rows_bytes(n_to, 2)}}, stream_);
  }
  // Adds the gradients stage d returned into dk and dv (fp32) at the rows sent then.
  void add_returned(int64_t d, const TensorView& dk, const TensorView& dv) {
    const int64_t to = plan_.stage_to(d), slot = d % 2, n_to = plan_.rows_to(to);
    pending_[slot]->wait(to);
    for (const KeyRun& run : plan_.sends(to)) {
      detail::add_into(seq_slice(dk, run.source, run.length),
                       seq_slice(in_[slot].rows_part(n_to, 0), run.offset, run.length), stream_);
      detail::add_into(seq_slice(dv, run.source, run.length),
                       seq_slice(in_[slot].rows_part(n_to, 1), run.offset, run.length), stream_);
    }
    pending_[slot]->finish();
    pending_[slot].reset();
  }

 private:
  const RankPlan& plan_;
  Transport& transport_;
  void* stream_;
  Buffer sums_[2], out_[2], in_[2];
  std::unique_ptr<Exchange> pending_[2];
};

}  // namespace

void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const RankPlan& plan, Transport& transport, const AttentionOptions& options, const TensorView* lse) {
  const RankShape s = check_inputs(q, k, v, plan, transport);
  check_rank_tensor(out, "out", s, s.Hq, s.D);
  if (lse) check_rank_lse(*lse, "lse", s);
  void* stream = options.stream;
  KvStages kv(k, v, s, plan, transport, stream);
  Buffer acc = Buffer::make(DType::F32, s.B, s.Hq, s.L, s.D, s.device);
  Buffer acc_lse = Buffer::make(DType::F32, s.B, s.Hq, s.L, 1, s.device);
  Buffer part = Buffer::make(DType::F32, s.B, s.Hq, plan.max_q_len(), s.D, s.device);
  Buffer part_lse = Buffer::make(DType::F32, s.B, s.Hq, plan.max_q_len(), 1, s.device);
  detail::fill(acc.view, 0.0, stream);
  detail::fill(acc_lse.view, -INFINITY, stream);
  auto call = plan.calls().begin();
  for (int64_t stage = 0; stage <= plan.num_stages(); ++stage) {
    for (; call != plan.calls().end() && call->stage == stage; ++call) {
      const CallSpec& c = call->spec;
      const TensorView k_call = kv.rows(*call, k, 0), v_call = kv.rows(*call, v, 1);
      const TensorView out_part = seq_slice(part.view, 0, c.q_len), lse_part = seq_slice(part_lse.view, 0, c.q_len);
      spattn::attention(seq_slice(q, c.q_offset, c.q_len), k_call, v_call, out_part, call->mask, options, &lse_part);
      detail::merge_into(seq_slice(acc.view, c.q_offset, c.q_len), seq_slice(acc_lse.view, c.q_offset, c.q_len),
                         out_part, lse_part, stream);
    }
    if (stage > 0) kv.end(stage);
  }
  detail::convert(out, acc.view, stream);
  if (lse) detail::convert(*lse, acc_lse.view, stream);
}

void attention_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                        const TensorView& lse, const TensorView& d_out, const AttentionGrads& grads,
                        const RankPlan& plan, Transport& transport, const AttentionOptions& options,
                        const TensorView* d_lse) {
  const RankShape s = check_inputs(q, k, v, plan, transport);
  check_rank_tensor(out, "out", s, s.Hq, s.D);
  check_rank_lse(lse, "lse", s);
  check_rank_tensor(d_out, "d_out", s, s.Hq, s.D);
  if (d_lse) check_rank_lse(*d_lse, "d_lse", s);
  check_rank_tensor(grads.dq, "dq", s, s.Hq, s.D);
  check_rank_tensor(grads.dk, "dk", s, s.Hkv, s.D);
  check_rank_tensor(grads.dv, "dv", s, s.Hkv, s.D);
  void* stream = options.stream;
  KvStages kv(k, v, s, plan, transport, stream);
  GradReturns returns(q.dtype, s, plan, transport, stream);
  Buffer dq = Buffer::make(DType::F32, s.B, s.Hq, s.L, s.D, s.device);
  Buffer dkv = Buffer::make(DType::F32, s.B, s.Hkv, s.L, s.D, s.device, 2);  // dk, dv of the own rows
  detail::fill(dq.view, 0.0, stream);
  detail::fill(dkv.part(0), 0.0, stream);
  detail::fill(dkv.part(1), 0.0, stream);
  Buffer dq_part = Buffer::make(DType::F32, s.B, s.Hq, plan.max_q_len(), s.D, s.device);
  Buffer dkv_part = Buffer::make(DType::F32, s.B, s.Hkv, plan.max_k_len(), s.D, s.device, 2);
  auto call = plan.calls().begin();
  for (int64_t stage = 0; stage <= plan.num_stages(); ++stage) {
    if (stage > 0) returns.begin(stage);
    for (; call != plan.calls().end() && call->stage == stage; ++call) {
      const CallSpec& c = call->spec;
      const TensorView k_call = kv.rows(*call, k, 0), v_call = kv.rows(*call, v, 1);
      const AttentionGrads part{seq_slice(dq_part.view, 0, c.q_len), seq_slice(dkv_part.part(0), 0, c.k_len),
                                seq_slice(dkv_part.part(1), 0, c.k_len)};
      const TensorView d_lse_call = d_lse ? seq_slice(*d_lse, c.q_offset, c.q_len) : TensorView{};
      spattn::attention_backward(seq_slice(q, c.q_offset, c.q_len), k_call, v_call,
                                 seq_slice(out, c.q_offset, c.q_len), seq_slice(lse, c.q_offset, c.q_len),
                                 seq_slice(d_out, c.q_offset, c.q_len), part, call->mask, options,
                                 d_lse ? &d_lse_call : nullptr);
      detail::add_into(seq_slice(dq.view, c.q_offset, c.q_len), part.dq, stream);
      const TensorView dk = stage == 0 ? dkv.part(0) : returns.sums(stage, 0);
      const TensorView dv = stage == 0 ? dkv.part(1) : returns.sums(stage, 1);
      detail::add_into(seq_slice(dk, c.k_offset, c.k_len), part.dk, stream);
      detail::add_into(seq_slice(dv, c.k_offset, c.k_len), part.dv, stream);
    }
    if (stage == 0) continue;
    kv.end(stage);
    returns.send(stage);
    if (stage > 1) returns.add_returned(stage - 1, dkv.part(0), dkv.part(1));  // stage order: the same sums every run
  }
  if (plan.num_stages() > 0) returns.add_returned(plan.num_stages(), dkv.part(0), dkv.part(1));
  detail::convert(grads.dq, dq.view, stream);
  detail::convert(grads.dk, dkv.part(0), stream);
  detail::convert(grads.dv, dkv.part(1), stream);
}

}  // namespace spattn::dist
