// tools/spattn/flag_names.cpp - library parameter names -> flags (see flag_names.hpp).
#include "flag_names.hpp"

#include <cctype>
#include <cstring>
#include <map>

namespace spattn::cli {
namespace {

// Library parameters whose flag is the same on every command.
const std::map<std::string, std::string>& fixed_names() {
  static const std::map<std::string, std::string> names = {
      {"window", "--window"},
      {"window_left", "--window-left"},
      {"window_right", "--window-right"},
      {"sink", "--sink"},
      {"stride", "--stride"},
      {"summary", "--summary"},
      {"segments", "--segments"},
      {"rates", "--rates"},
      {"window_blocks", "--window-blocks"},
      {"global_blocks", "--global-blocks"},
      {"random_blocks", "--random-blocks"},
      {"global_tokens", "--global-tokens"},
      {"topk", "--topk"},
      {"tau", "--tau"},
      {"min_blocks", "--min-blocks"},
      {"max_blocks", "--max-blocks"},
      {"sink_blocks", "--sink-blocks"},
      {"local_blocks", "--local-blocks"},
      {"num_heads", "--heads"},
  };
  return names;
}

bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Does `text` end with "--flag " (so the next word is that flag's value, as in "--pattern topk")?
bool follows_flag(const std::string& text) {
  if (text.size() < 2 || text.back() != ' ') return false;
  const size_t space = text.rfind(' ', text.size() - 2);
  const size_t word = space == std::string::npos ? 0 : space + 1;
  return text.compare(word, 2, "--") == 0;
}

}  // namespace

std::string name_flags(const std::string& message, const Args& args) {
  std::map<std::string, std::string> names = fixed_names();
  // Lengths and block sizes: the flag this command reads them from.
  const bool bench = args.command() == "spattn bench";
  const std::string q_flag = bench ? "--seqs" : "--seq";
  const std::string k_flag = bench ? "--seqs" : args.typed({"seq-k"}).empty() ? "--seq" : "--seq-k";
  for (const char* name : {"q_len", "Lq"}) names[name] = q_flag;
  for (const char* name : {"k_len", "Lk", "seq_len_k"}) names[name] = k_flag;
  names["block_q"] = args.typed({"block-q"}).empty() ? "--block" : "--block-q";
  names["block_k"] = args.typed({"block-k"}).empty() ? "--block" : "--block-k";

  std::string out;
  bool quoted = false;
  for (size_t at = 0; at < message.size();) {
    const char c = message[at];
    if (c == '\'') quoted = !quoted;
    const bool starts = !quoted && word_char(c) && (at == 0 || std::strchr(" (,", message[at - 1]));
    if (!starts) {
      out += c;
      ++at;
      continue;
    }
    size_t end = at;
    while (end < message.size() && word_char(message[end])) ++end;
    const std::string word = message.substr(at, end - at);
    const bool ends = end == message.size() || std::strchr(" ),:[=", message[end]);
    const bool after_flag = follows_flag(out);
    const auto it = names.find(word);
    out += ends && !after_flag && it != names.end() ? it->second : word;
    at = end;
  }
  return out;
}

}  // namespace spattn::cli
