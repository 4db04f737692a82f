// dist/cp_attention.cpp - context-parallel attention (spattn/dist_attention.hpp):
// a rank's plan (RankPlan: its calls' masks, what it sends and receives), the
// forward (pack, exchange, attend stage by stage, merge by LSE) and the
// backward (exchange again, per-call gradients under the merged LSE, the
// received rows' gradients back to their owners).
#include <algorithm>
#include <memory>

#include "dist/cp_tensor_ops.hpp"
#include "spattn/dist_attention.hpp"
#include "spattn/error.hpp"

namespace spattn::dist {

// ---- RankPlan ----

RankPlan::RankPlan(const ContextParallelPlan& plan, int64_t rank, int64_t block_q)
    : rank_(rank), layout_(plan.layout()), num_heads_(plan.num_heads()) {
  const int64_t world = layout_.world_size();
  require(rank >= 0 && rank < world, "rank must be in [0, ", world, "), got ", rank);
  require(block_q >= 1, "block_q must be >= 1, got ", block_q);
  std::vector<int64_t> stage(static_cast<size_t>(world), 0);  // own rows: stage 0
  const std::vector<int64_t> order = exchange_order(rank, world);
  for (size_t s = 0; s < order.size(); ++s) stage[static_cast<size_t>(order[s])] = static_cast<int64_t>(s) + 1;
  std::vector<CallSpec> specs = plan.calls(rank);
  std::stable_sort(specs.begin(), specs.end(), [&](const CallSpec& a, const CallSpec& b) {
    return stage[static_cast<size_t>(a.peer < 0 ? rank : a.peer)] < stage[static_cast<size_t>(b.peer < 0 ? rank : b.peer)];
  });
  const int64_t L = layout_.seq_len();
  for (const CallSpec& s : specs) {
    const Pattern framed = plan.pattern().framed(s.q_start, s.k_start, L, L);
    BlockMask mask = BlockMask::build(framed, MaskShape{s.q_len, s.k_len, block_q, layout_.block(), num_heads_});
    if (mask.num_blocks() == 0) continue;
    max_q_len_ = std::max(max_q_len_, s.q_len);
    max_k_len_ = std::max(max_k_len_, s.k_len);
    calls_.push_back(Call{s, std::move(mask)});
  }
  sends_.resize(static_cast<size_t>(world));
  rows_to_.assign(static_cast<size_t>(world), 0);
  rows_from_.assign(static_cast<size_t>(world), 0);
  for (int64_t p = 0; p < world; ++p) {
    if (p == rank) continue;
    sends_[static_cast<size_t>(p)] = plan.runs(p, rank);
    rows_to_[static_cast<size_t>(p)] = plan.rows_received(p, rank);
    rows_from_[static_cast<size_t>(p)] = plan.rows_received(rank, p);
  }
}

const std::vector<KeyRun>& RankPlan::sends(int64_t peer) const {
  require(peer >= 0 && peer < layout_.world_size(), "peer must be in [0, ", layout_.world_size(), "), got ", peer);
  return sends_[static_cast<size_t>(peer)];
}
int64_t RankPlan::rows_to(int64_t peer) const {
  sends(peer);  // checks the peer
  return rows_to_[static_cast<size_t>(peer)];
}
int64_t RankPlan::rows_from(int64_t peer) const {
  sends(peer);
  return rows_from_[static_cast<size_t>(peer)];
}

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
  TensorView part(int64_t i) const {
    TensorView t = view;
    t.data = static_cast<unsigned char*>(memory.get()) + i * view.numel() * dtype_size(view.dtype);
    return t;
  }
  int64_t bytes(int64_t parts) const { return parts * view.numel() * dtype_size(view.dtype); }
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
  check_rank_tensor(k, "k", s.B, s.Hkv, s.L, s.D);
  check_rank_tensor(v, "v", s.B, s.Hkv, s.L, s.D);
  require(k.dtype == q.dtype && v.dtype == q.dtype, "context parallelism: q, k and v must share one dtype");
  for (const TensorView* t : {&k, &v})
    require(t->empty() || detail::on_device(t->data) == s.device,
            "context parallelism: q, k and v must all lie in host memory or all in device memory");
  return s;
}

// The K/V rows of one exchange: packed per peer from this rank's k and v,
// and the buffers the peers' rows arrive in; started on construction.
struct KvExchange {
  std::vector<Buffer> out, in;  // per peer
  std::unique_ptr<Exchange> exchange;

  KvExchange(const TensorView& k, const TensorView& v, const RankShape& s, const RankPlan& plan, Transport& transport,
             void* stream) {
    const int64_t world = plan.layout().world_size();
    out.resize(static_cast<size_t>(world));
    in.resize(static_cast<size_t>(world));
    std::vector<Message> sends, recvs;
    for (int64_t p = 0; p < world; ++p) {
      if (p == plan.rank()) continue;
      Buffer& o = out[static_cast<size_t>(p)];
      o = Buffer::make(k.dtype, s.B, s.Hkv, plan.rows_to(p), s.D, s.device, 2);
      for (const KeyRun& run : plan.sends(p)) {
        detail::convert(seq_slice(o.part(0), run.offset, run.length), seq_slice(k, run.source, run.length), stream);
        detail::convert(seq_slice(o.part(1), run.offset, run.length), seq_slice(v, run.source, run.length), stream);
      }
      Buffer& i = in[static_cast<size_t>(p)];
      i = Buffer::make(k.dtype, s.B, s.Hkv, plan.rows_from(p), s.D, s.device, 2);
      sends.push_back(Message{p, o.memory.get(), o.bytes(2)});
      recvs.push_back(Message{p, i.memory.get(), i.bytes(2)});
    }
    exchange = transport.start(sends, recvs, stream);
  }

  // The keys (part 0) or values (part 1) of a call, once they may be read.
  TensorView keys(const RankPlan::Call& call, const TensorView& own, int64_t part) {
    const CallSpec& c = call.spec;
    if (c.peer < 0) return seq_slice(own, c.k_offset, c.k_len);
    exchange->wait(c.peer);
    return seq_slice(in[static_cast<size_t>(c.peer)].part(part), c.k_offset, c.k_len);
  }
};

}  // namespace

void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const RankPlan& plan, Transport& transport, const AttentionOptions& options, const TensorView* lse) {
  const RankShape s = check_inputs(q, k, v, plan, transport);
  check_rank_tensor(out, "out", s.B, s.Hq, s.L, s.D);
  if (lse) {
    check_rank_tensor(*lse, "lse", s.B, s.Hq, s.L, 1);
    require(lse->dtype == DType::F32, "context parallelism: lse must be fp32");
  }
  void* stream = options.stream;
  KvExchange kv(k, v, s, plan, transport, stream);
  Buffer acc = Buffer::make(DType::F32, s.B, s.Hq, s.L, s.D, s.device);
  Buffer acc_lse = Buffer::make(DType::F32, s.B, s.Hq, s.L, 1, s.device);
  Buffer part = Buffer::make(DType::F32, s.B, s.Hq, plan.max_q_len(), s.D, s.device);
  Buffer part_lse = Buffer::make(DType::F32, s.B, s.Hq, plan.max_q_len(), 1, s.device);
  detail::fill(acc.view, 0.0, stream);
  detail::fill(acc_lse.view, -INFINITY, stream);
  for (const RankPlan::Call& call : plan.calls()) {
    const CallSpec& c = call.spec;
    const TensorView k_call = kv.keys(call, k, 0), v_call = kv.keys(call, v, 1);
    const TensorView out_part = seq_slice(part.view, 0, c.q_len), lse_part = seq_slice(part_lse.view, 0, c.q_len);
    spattn::attention(seq_slice(q, c.q_offset, c.q_len), k_call, v_call, out_part, call.mask, options, &lse_part);
    detail::merge_into(seq_slice(acc.view, c.q_offset, c.q_len), seq_slice(acc_lse.view, c.q_offset, c.q_len),
                       out_part, lse_part, stream);
  }
  kv.exchange->finish();
  detail::convert(out, acc.view, stream);
  if (lse) detail::convert(*lse, acc_lse.view, stream);
}

void attention_backward(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                        const TensorView& lse, const TensorView& d_out, const AttentionGrads& grads,
                        const RankPlan& plan, Transport& transport, const AttentionOptions& options) {
  const RankShape s = check_inputs(q, k, v, plan, transport);
  check_rank_tensor(out, "out", s.B, s.Hq, s.L, s.D);
  check_rank_tensor(lse, "lse", s.B, s.Hq, s.L, 1);
  require(lse.dtype == DType::F32, "context parallelism: lse must be fp32");
  check_rank_tensor(d_out, "d_out", s.B, s.Hq, s.L, s.D);
  check_rank_tensor(grads.dq, "dq", s.B, s.Hq, s.L, s.D);
  check_rank_tensor(grads.dk, "dk", s.B, s.Hkv, s.L, s.D);
  check_rank_tensor(grads.dv, "dv", s.B, s.Hkv, s.L, s.D);
  void* stream = options.stream;
  const int64_t world = plan.layout().world_size();
  KvExchange kv(k, v, s, plan, transport, stream);

  Buffer dq = Buffer::make(DType::F32, s.B, s.Hq, s.L, s.D, s.device);
  Buffer dkv = Buffer::make(DType::F32, s.B, s.Hkv, s.L, s.D, s.device, 2);  // dk, dv of the own rows
  std::vector<Buffer> d_received(static_cast<size_t>(world));                 // dk, dv of each peer's rows
  detail::fill(dq.view, 0.0, stream);
  detail::fill(dkv.part(0), 0.0, stream);
  detail::fill(dkv.part(1), 0.0, stream);
  for (int64_t p = 0; p < world; ++p) {
    if (p == plan.rank()) continue;
    Buffer& b = d_received[static_cast<size_t>(p)];
    b = Buffer::make(DType::F32, s.B, s.Hkv, plan.rows_from(p), s.D, s.device, 2);
    detail::fill(b.part(0), 0.0, stream);
    detail::fill(b.part(1), 0.0, stream);
  }
  Buffer dq_part = Buffer::make(DType::F32, s.B, s.Hq, plan.max_q_len(), s.D, s.device);
  Buffer dkv_part = Buffer::make(DType::F32, s.B, s.Hkv, plan.max_k_len(), s.D, s.device, 2);
  for (const RankPlan::Call& call : plan.calls()) {
    const CallSpec& c = call.spec;
    const TensorView k_call = kv.keys(call, k, 0), v_call = kv.keys(call, v, 1);
    const AttentionGrads part{seq_slice(dq_part.view, 0, c.q_len), seq_slice(dkv_part.part(0), 0, c.k_len),
                              seq_slice(dkv_part.part(1), 0, c.k_len)};
    spattn::attention_backward(seq_slice(q, c.q_offset, c.q_len), k_call, v_call, seq_slice(out, c.q_offset, c.q_len),
                               seq_slice(lse, c.q_offset, c.q_len), seq_slice(d_out, c.q_offset, c.q_len), part,
                               call.mask, options);
    detail::add_into(seq_slice(dq.view, c.q_offset, c.q_len), part.dq, stream);
    const Buffer& target = c.peer < 0 ? dkv : d_received[static_cast<size_t>(c.peer)];
    detail::add_into(seq_slice(target.part(0), c.k_offset, c.k_len), part.dk, stream);
    detail::add_into(seq_slice(target.part(1), c.k_offset, c.k_len), part.dv, stream);
  }
  kv.exchange->finish();

  // The received rows' gradients go back to their owners, in the inputs' dtype.
  std::vector<Buffer> back_out(static_cast<size_t>(world)), back_in(static_cast<size_t>(world));
  std::vector<Message> sends, recvs;
  for (int64_t p = 0; p < world; ++p) {
    if (p == plan.rank()) continue;
    Buffer& o = back_out[static_cast<size_t>(p)];
    o = Buffer::make(q.dtype, s.B, s.Hkv, plan.rows_from(p), s.D, s.device, 2);
    detail::convert(o.part(0), d_received[static_cast<size_t>(p)].part(0), stream);
    detail::convert(o.part(1), d_received[static_cast<size_t>(p)].part(1), stream);
    Buffer& i = back_in[static_cast<size_t>(p)];
    i = Buffer::make(q.dtype, s.B, s.Hkv, plan.rows_to(p), s.D, s.device, 2);
    sends.push_back(Message{p, o.memory.get(), o.bytes(2)});
    recvs.push_back(Message{p, i.memory.get(), i.bytes(2)});
  }
  std::unique_ptr<Exchange> back = transport.start(sends, recvs, stream);
  for (int64_t p = 0; p < world; ++p) {  // rank order: the same sums run after run
    if (p == plan.rank()) continue;
    back->wait(p);
    const Buffer& i = back_in[static_cast<size_t>(p)];
    for (const KeyRun& run : plan.sends(p)) {
      detail::add_into(seq_slice(dkv.part(0), run.source, run.length), seq_slice(i.part(0), run.offset, run.length),
                       stream);
      detail::add_into(seq_slice(dkv.part(1), run.source, run.length), seq_slice(i.part(1), run.offset, run.length),
                       stream);
    }
  }
  back->finish();
  detail::convert(grads.dq, dq.view, stream);
  detail::convert(grads.dk, dkv.part(0), stream);
  detail::convert(grads.dv, dkv.part(1), stream);
}

}  // namespace spattn::dist
