// The shared pieces of text/: split behaviours, the hash maps, JSON field helpers.
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "text/components.h"

namespace sluice::text::detail {

using nlohmann::json;

const json& field(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end())
    throw InputError(str(where, ": no \"", key, "\""), "the file is not a tokenizer.json of Hugging Face's format, or is damaged");
  return *it;
}

std::string string_field(const json& j, const char* key, const std::string& where, const std::string& fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_string()) throw InputError(str(where, ": \"", key, "\" is not a string"));
  return it->get<std::string>();
}

bool bool_field(const json& j, const char* key, const std::string& where, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw InputError(str(where, ": \"", key, "\" is not true or false"));
  return it->get<bool>();
}

Behavior behavior_of(const json& j, const std::string& where) {
  const std::string b = j.is_string() ? j.get<std::string>() : "";
  if (b == "Removed") return Behavior::Removed;
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  throw InputError(str(where, ": behavior ", j.dump(), " is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous"));
}

void split_by(const std::vector<Seg>& segs, uint32_t base, Behavior b, std::vector<Piece>& out) {
  const auto push = [&](uint32_t s, uint32_t e) { out.push_back({base + s, e - s, -1}); };
  const std::size_t first = out.size();
  switch (b) {
    case Behavior::Removed:
      for (const Seg& s : segs)
        if (!s.match) push(s.start, s.end);
      break;
    case Behavior::Isolated:
      for (const Seg& s : segs) push(s.start, s.end);
      break;
    case Behavior::MergedWithPrevious: {
      bool previous = false;
      for (const Seg& s : segs) {
        if (s.match && !previous && out.size() > first)
          out.back().len = base + s.end - out.back().off;
        else
          push(s.start, s.end);
        previous = s.match;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      bool previous = false;
      for (std::size_t k = segs.size(); k-- > 0;) {
        const Seg& s = segs[k];
        if (s.match && !previous && out.size() > first) {
          Piece& p = out.back();
          const uint32_t end = p.off + p.len;
          p.off = base + s.start;
          p.len = end - p.off;
        } else {
          push(s.start, s.end);
        }
        previous = s.match;
      }
      std::reverse(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
      break;
    }
    case Behavior::Contiguous: {
      bool previous = false;
      for (const Seg& s : segs) {
        if (s.match == previous && out.size() > first)
          out.back().len = base + s.end - out.back().off;
        else
          push(s.start, s.end);
        previous = s.match;
      }
      break;
    }
  }
  // The reference drops empty pieces.
  out.erase(std::remove_if(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(), [](const Piece& p) { return p.len == 0; }),
            out.end());
}

// ---- StrMap ------------------------------------------------------------------------------------

uint64_t StrMap::hash(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (s.size() * 0xFF51AFD7ED558CCDull);
  std::size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
  }
  uint64_t w = 0;
  std::memcpy(&w, s.data() + i, s.size() - i);
  h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 32;
  return h;
}

void StrMap::reserve(std::size_t n) {
  keys_.reserve(n);
  values_.reserve(n);
  std::size_t want = 16;
  while (want < n * 2) want <<= 1;
  if (slots_.size() < want) {
    slots_.assign(want, 0);
    for (std::size_t i = 0; i < keys_.size(); ++i) {
      std::size_t m = slots_.size() - 1, k = hash(keys_[i]) & m;
      while (slots_[k]) k = (k + 1) & m;
      slots_[k] = static_cast<uint32_t>(i + 1);
    }
  }
}

void StrMap::grow() { reserve(std::max<std::size_t>(16, keys_.size() * 2 + 2)); }

bool StrMap::insert(std::string key, int32_t value) {
  if ((keys_.size() + 1) * 2 > slots_.size()) grow();
  const std::size_t m = slots_.size() - 1;
  std::size_t k = hash(key) & m;
  while (slots_[k]) {
    if (keys_[slots_[k] - 1] == key) return false;
    k = (k + 1) & m;
  }
  keys_.push_back(std::move(key));
  values_.push_back(value);
  slots_[k] = static_cast<uint32_t>(keys_.size());
  return true;
}

void StrMap::clear() {
  keys_.clear();
  values_.clear();
  std::fill(slots_.begin(), slots_.end(), 0u);
}

const int32_t* StrMap::find(std::string_view key) const {
  if (slots_.empty()) return nullptr;
  const std::size_t m = slots_.size() - 1;
  std::size_t k = hash(key) & m;
  while (slots_[k]) {
    const std::size_t i = slots_[k] - 1;
    if (keys_[i] == key) return &values_[i];
    k = (k + 1) & m;
  }
  return nullptr;
}

// ---- U64Map ------------------------------------------------------------------------------------

namespace {
inline std::size_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xFF51AFD7ED558CCDull;
  k ^= k >> 33;
  return static_cast<std::size_t>(k);
}
}  // namespace

void U64Map::grow() {
  std::vector<uint64_t> keys;
  std::vector<int64_t> values;
  std::vector<uint8_t> used;
  keys.swap(keys_);
  values.swap(values_);
  used.swap(used_);
  const std::size_t n = std::max<std::size_t>(64, keys.size() * 2);
  keys_.assign(n, 0);
  values_.assign(n, 0);
  used_.assign(n, 0);
  count_ = 0;
  for (std::size_t i = 0; i < keys.size(); ++i)
    if (used[i]) insert(keys[i], values[i]);
}

void U64Map::insert(uint64_t key, int64_t value) {
  if ((count_ + 1) * 2 > keys_.size()) grow();
  const std::size_t m = keys_.size() - 1;
  std::size_t k = mix(key) & m;
  while (used_[k]) {
    if (keys_[k] == key) return;
    k = (k + 1) & m;
  }
  used_[k] = 1;
  keys_[k] = key;
  values_[k] = value;
  ++count_;
}

const int64_t* U64Map::find(uint64_t key) const {
  if (keys_.empty()) return nullptr;
  const std::size_t m = keys_.size() - 1;
  std::size_t k = mix(key) & m;
  while (used_[k]) {
    if (keys_[k] == key) return &values_[k];
    k = (k + 1) & m;
  }
  return nullptr;
}

}  // namespace sluice::text::detail
