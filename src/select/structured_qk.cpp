// select/structured_qk.cpp - synthetic q and k whose attention looks like a
// language model's: a local band, sink keys, a few vertical keys, topic
// segments that recur far apart, noise.
//
// The head dimension is split into features whose products add up to the
// logit terms documented in select.hpp (scale 1/sqrt(D) assumed):
//   [0, 2F)      positional pairs: q = a cos(w_f p), a sin(w_f p); k = a cos(w_f j),
//                a sin(w_f j), so q.k = a^2 sum_f cos(w_f (p - j)): a peak at
//                p = j decaying over local_width and beyond (F = clamp((D-2)/4, 1, 16));
//   2F           sink feature: constant on q, nonzero on keys j < sink_tokens;
//   2F + 1       vertical feature: constant on q, nonzero on the vertical keys;
//   2F + 2 + t   topic t (t < T = min(topics, (D - 2F - 2) / 2)): nonzero on the
//                q and k rows whose position lies in a segment of topic t
//                (topics beyond T share feature t mod T);
//   the rest     content noise: independent normals on q and k.
// Random draws come from splitmix64 streams keyed by (seed, role, batch,
// head), so the output does not depend on threads or the standard library.
#include <algorithm>
#include <cmath>
#include <vector>

#include "select/block_scores.hpp"
#include "select/select_config.hpp"
#include "spattn/error.hpp"
#include "spattn/select.hpp"
#include "spattn/splitmix64.hpp"

namespace spattn {
namespace {

constexpr double kPi = 3.14159265358979323846;

enum class Stream : uint64_t { QueryHead = 1, KeyHead = 2, KeyWidth = 3, Segments = 4 };


SplitMix64 stream(uint64_t seed, Stream role, int64_t b, int64_t h) {
  SplitMix64 mixer(seed);
  uint64_t state = mixer.next() ^ static_cast<uint64_t>(role);
  state = SplitMix64(state).next() ^ static_cast<uint64_t>(b);
  state = SplitMix64(state).next() ^ static_cast<uint64_t>(h);
  return SplitMix64(SplitMix64(state).next());
}

// Feature layout of a head dimension D.
struct Layout {
  int64_t freqs = 0;  // F
  int64_t sink = 0, vertical = 0, topic_first = 0, topic_dims = 0, noise_first = 0, noise_dims = 0;
  Layout(int64_t D, int64_t topics) {
    freqs = std::clamp<int64_t>((D - 2) / 4, 1, 16);
    sink = 2 * freqs;
    vertical = sink + 1;
    topic_first = vertical + 1;
    topic_dims = std::min(topics, (D - topic_first) / 2);
    noise_first = topic_first + topic_dims;
    noise_dims = D - noise_first;
  }
};

// Topic of every position in [first, k_len) of batch element b (first < 0
// covers queries before the first key when Lq > Lk).
struct TopicTable {
  int64_t first = 0;
  std::vector<int32_t> topic;
  int32_t at(int64_t position) const { return topic[position - first]; }
};

TopicTable topic_table(const StructuredQKConfig& c, int64_t b, int64_t first, int64_t k_len) {
  TopicTable t;
  t.first = first;
  t.topic.resize(static_cast<size_t>(k_len - first));
  SplitMix64 rng = stream(c.seed, Stream::Segments, b, 0);
  const double topics = static_cast<double>(std::max<int64_t>(c.topics, 1));
  for (size_t at = 0; at < t.topic.size();) {
    const double length = c.topic_span * (0.5 + 1.5 * rng.uniform());
    const auto topic = static_cast<int32_t>(rng.uniform() * topics);
    const size_t end = std::min(t.topic.size(), at + std::max<size_t>(1, static_cast<size_t>(length)));
    for (; at < end; ++at) t.topic[at] = topic;
  }
  return t;
}

// The topic features of row l: `amplitude` on the topic's feature, 0 elsewhere.
void write_topic(const TensorView& t, const Layout& lay, int64_t b, int64_t h, int64_t l, int32_t topic,
                 double amplitude) {
  for (int64_t f = 0; f < lay.topic_dims; ++f)
    t.store(b, h, l, lay.topic_first + f, f == topic % lay.topic_dims ? amplitude : 0.0);
}

// Angular frequencies of kv head (b, h): geometric from pi / width down to pi / (4 Lk).
std::vector<double> head_frequencies(const StructuredQKConfig& c, int64_t b, int64_t h, int64_t freqs,
                                     int64_t k_len) {
  SplitMix64 rng = stream(c.seed, Stream::KeyWidth, b, h);
  const double width = c.local_width * std::exp2(2.0 * rng.uniform() - 1.0);
  const double hi = kPi / width, lo = std::min(hi, kPi / (4.0 * static_cast<double>(k_len)));
  std::vector<double> w(static_cast<size_t>(freqs));
  for (int64_t f = 0; f < freqs; ++f)
    w[f] = freqs == 1 ? hi : hi * std::pow(lo / hi, static_cast<double>(f) / static_cast<double>(freqs - 1));
  return w;
}

void check_config(const StructuredQKConfig& c) {
  const double strengths[5] = {c.local_strength, c.sink_strength, c.vertical_strength, c.topic_strength,
                               c.noise};
  const char* names[5] = {"local_strength", "sink_strength", "vertical_strength", "topic_strength", "noise"};
  for (int t = 0; t < 5; ++t)
    require(std::isfinite(strengths[t]) && strengths[t] >= 0.0, names[t], " must be finite and >= 0, got ",
            strengths[t]);
  require(std::isfinite(c.local_width) && c.local_width > 0.0, "local_width must be > 0, got ",
          c.local_width);
  require(c.sink_tokens >= 0, "sink_tokens must be >= 0, got ", c.sink_tokens);
  require(c.vertical_keys >= 0, "vertical_keys must be >= 0, got ", c.vertical_keys);
  require(c.topics >= 0, "topics must be >= 0, got ", c.topics);
  require(std::isfinite(c.topic_span) && c.topic_span > 0.0, "topic_span must be > 0, got ", c.topic_span);
}

void check_tensors(const TensorView& q, const TensorView& k) {
  select_detail::validate_qk_pair(q, k, false);  // each is written in its own dtype
  require(q.head_dim() >= 4, "make_structured_qk needs head_dim >= 4, got ", q.head_dim());
}

void write_query_head(const TensorView& q, const StructuredQKConfig& c, const Layout& lay,
                      const TopicTable& topics, int64_t b, int64_t h, int64_t kv_head, int64_t k_len) {
  const int64_t Lq = q.seq_len(), D = q.head_dim();
  const double root_d = std::sqrt(static_cast<double>(D));
  SplitMix64 rng = stream(c.seed, Stream::QueryHead, b, h);
  double factor[5];  // local, sink, vertical, topic, noise
  for (double& f : factor) f = 0.5 + rng.uniform();
  const std::vector<double> w = head_frequencies(c, b, kv_head, lay.freqs, k_len);
  const double a_pos = factor[0] * std::sqrt(c.local_strength * root_d / static_cast<double>(lay.freqs));
  const double a_sink = factor[1] * std::sqrt(c.sink_strength * root_d);
  const double a_vertical = factor[2] * std::sqrt(c.vertical_strength * root_d);
  const double a_topic = factor[3] * std::sqrt(c.topic_strength * root_d);
  const double sigma =
      lay.noise_dims > 0
          ? factor[4] * std::sqrt(c.noise * root_d / std::sqrt(static_cast<double>(lay.noise_dims)))
          : 0.0;
  for (int64_t i = 0; i < Lq; ++i) {
    const double p = static_cast<double>(i + k_len - Lq);
    for (int64_t f = 0; f < lay.freqs; ++f) {
      q.store(b, h, i, 2 * f, a_pos * std::cos(w[f] * p));
      q.store(b, h, i, 2 * f + 1, a_pos * std::sin(w[f] * p));
    }
    q.store(b, h, i, lay.sink, a_sink);
    q.store(b, h, i, lay.vertical, a_vertical);
    if (lay.topic_dims > 0) write_topic(q, lay, b, h, i, topics.at(i + k_len - Lq), a_topic);
    for (int64_t d = lay.noise_first; d < D; ++d) q.store(b, h, i, d, sigma * rng.normal());
  }
}

void write_key_head(const TensorView& k, const StructuredQKConfig& c, const Layout& lay,
                    const TopicTable& topics, int64_t b, int64_t h) {
  const int64_t Lk = k.seq_len(), D = k.head_dim();
  const double root_d = std::sqrt(static_cast<double>(D));
  SplitMix64 rng = stream(c.seed, Stream::KeyHead, b, h);
  std::vector<uint8_t> vertical(static_cast<size_t>(Lk), 0);
  for (int64_t v = 0; v < c.vertical_keys; ++v)
    vertical[static_cast<int64_t>(rng.uniform() * static_cast<double>(Lk))] = 1;
  const std::vector<double> w = head_frequencies(c, b, h, lay.freqs, Lk);
  const double a_pos = std::sqrt(c.local_strength * root_d / static_cast<double>(lay.freqs));
  const double a_sink = std::sqrt(c.sink_strength * root_d);
  const double a_vertical = std::sqrt(c.vertical_strength * root_d);
  const double a_topic = std::sqrt(c.topic_strength * root_d);
  const double sigma =
      lay.noise_dims > 0 ? std::sqrt(c.noise * root_d / std::sqrt(static_cast<double>(lay.noise_dims))) : 0.0;
  for (int64_t j = 0; j < Lk; ++j) {
    const double pos = static_cast<double>(j);
    for (int64_t f = 0; f < lay.freqs; ++f) {
      k.store(b, h, j, 2 * f, a_pos * std::cos(w[f] * pos));
      k.store(b, h, j, 2 * f + 1, a_pos * std::sin(w[f] * pos));
    }
    k.store(b, h, j, lay.sink, j < c.sink_tokens ? a_sink : 0.0);
    k.store(b, h, j, lay.vertical, vertical[j] ? a_vertical : 0.0);
    if (lay.topic_dims > 0) write_topic(k, lay, b, h, j, topics.at(j), a_topic);
    for (int64_t d = lay.noise_first; d < D; ++d) k.store(b, h, j, d, sigma * rng.normal());
  }
}

}  // namespace

void make_structured_qk(const TensorView& q, const TensorView& k, const StructuredQKConfig& config) {
  check_config(config);
  check_tensors(q, k);
  const Layout lay(q.head_dim(), config.topics);
  const int64_t B = q.batch(), Hq = q.heads(), Hkv = k.heads(), group = Hq / Hkv;
  const int64_t first_position = std::min<int64_t>(0, k.seq_len() - q.seq_len());
  std::vector<TopicTable> topics;
  for (int64_t b = 0; b < B; ++b) topics.push_back(topic_table(config, b, first_position, k.seq_len()));
  const int64_t work = B * (Hq * q.seq_len() + Hkv * k.seq_len()) * q.head_dim();
#pragma omp parallel for collapse(2) schedule(dynamic) if (work >= select_detail::kMinParallelWork)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hq + Hkv; ++h) {
      if (h < Hq)
        write_query_head(q, config, lay, topics[b], b, h, h / group, k.seq_len());
      else
        write_key_head(k, config, lay, topics[b], b, h - Hq);
    }
  }
}

}  // namespace spattn
