#include "formats/ownership_text.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "formats/basics.h"

namespace tilec::ir {
namespace {

using fb::OwnershipKind;

class OwnershipParser {
 public:
  explicit OwnershipParser(std::string_view text) : text_(text) {}

  std::optional<fb::OwnershipT> Parse() {
    fb::OwnershipT o;
    std::string_view kind = Word();
    if (kind == "blocked") {
      o.kind = OwnershipKind::Blocked;
    } else if (kind == "flat") {
      o.kind = OwnershipKind::Flat;
    } else {
      return Fail(kind.empty()
                      ? "expected 'blocked' or 'flat'"
                      : "unknown ownership kind '" + std::string(kind) + "'");
    }
    if (!Expect('(')) return std::nullopt;
    bool need_comma = false;
    if (o.kind == OwnershipKind::Blocked) {
      do {
        if (o.partitions.size() == kMaxRank) {
          return Fail("more than " + std::to_string(kMaxRank) + " axes");
        }
        int64_t parts;
        if (!Number(&parts)) return std::nullopt;
        if (parts < 1) return Fail("a partition count must be at least 1");
        o.partitions.push_back(static_cast<int32_t>(parts));
      } while (Accept('x'));
      need_comma = true;
    }
    bool seen_grain = false, seen_tiles = false, seen_rep = false,
         seen_first = false, seen_stride = false, seen_order = false;
    while (!Accept(')')) {
      if (need_comma && !Expect(',')) return std::nullopt;
      need_comma = true;
      const size_t key_at = Position();
      const std::string_view key = Word();
      if (key == "order" && o.kind == OwnershipKind::Blocked) {
        if (seen_order) {
          pos_ = key_at;
          return Fail("option 'order' given twice");
        }
        seen_order = true;
        if (!Expect('=')) return std::nullopt;
        // A comma-separated list of axes. Commas also separate options, so a
        // comma followed by a digit continues the list and one followed by
        // anything else ends it (and stands for the option separator).
        while (true) {
          if (o.axis_order.size() > 2 * kMaxRank) {
            return Fail("order lists more than " +
                        std::to_string(2 * kMaxRank + 1) + " axes");
          }
          int64_t axis;
          if (!Number(&axis)) return std::nullopt;
          o.axis_order.push_back(static_cast<int32_t>(axis));
          const size_t before = pos_;
          if (!Accept(',')) break;
          if (Position() < text_.size() && text_[pos_] >= '0' &&
              text_[pos_] <= '9') {
            continue;
          }
          pos_ = before;  // the separator of the next option
          break;
        }
        continue;
      }
      if (key == "sub" && o.kind == OwnershipKind::Blocked) {
        if (!o.sub_partitions.empty()) {
          pos_ = key_at;
          return Fail("option 'sub' given twice");
        }
        if (!Expect('=')) return std::nullopt;
        do {
          if (o.sub_partitions.size() == kMaxRank) {
            return Fail("more than " + std::to_string(kMaxRank) + " axes");
          }
          int64_t parts;
          if (!Number(&parts)) return std::nullopt;
          if (parts < 1) return Fail("a sub-partition count must be at least 1");
          o.sub_partitions.push_back(static_cast<int32_t>(parts));
        } while (Accept('x'));
        continue;
      }
      int32_t* field = nullptr;
      bool* seen = nullptr;
      int64_t minimum = 1;
      if (key == "rep" && o.kind == OwnershipKind::Blocked) {
        field = &o.replicas, seen = &seen_rep;
      } else if (key == "grain" && o.kind == OwnershipKind::Flat) {
        field = &o.grain, seen = &seen_grain;
      } else if (key == "tiles" && o.kind == OwnershipKind::Flat) {
        field = &o.tiles, seen = &seen_tiles;
      } else if (key == "first") {
        field = &o.first_tile, seen = &seen_first, minimum = 0;
      } else if (key == "stride") {
        field = &o.tile_stride, seen = &seen_stride;
      } else {
        pos_ = key_at;
        if (key.empty()) return Fail("expected an option name");
        return Fail("unknown option '" + std::string(key) + "' for " +
                    (o.kind == OwnershipKind::Blocked ? "blocked" : "flat") +
                    " (options: " +
                    (o.kind == OwnershipKind::Blocked
                         ? "sub, rep, order, first, stride"
                         : "grain, tiles, first, stride") +
                    ")");
      }
      if (*seen) {
        pos_ = key_at;
        return Fail("option '" + std::string(key) + "' given twice");
      }
      *seen = true;
      if (!Expect('=')) return std::nullopt;
      const size_t value_at = Position();
      int64_t value;
      if (!Number(&value)) return std::nullopt;
      if (value < minimum) {
        pos_ = value_at;
        return Fail(std::string(key) + " must be at least " +
                    std::to_string(minimum));
      }
      *field = static_cast<int32_t>(value);
    }
    if (o.kind == OwnershipKind::Flat && (!seen_grain || !seen_tiles)) {
      return Fail(std::string("flat needs ") + (seen_grain ? "" : "grain=") +
                  (!seen_grain && !seen_tiles ? " and " : "") +
                  (seen_tiles ? "" : "tiles="));
    }
    if (Position() != text_.size()) {
      return Fail("unexpected text after the closing ')'");
    }
    if (!o.sub_partitions.empty() &&
        o.sub_partitions.size() != o.partitions.size()) {
      return Fail("sub= needs one count per axis");
    }
    if (!o.axis_order.empty()) {
      const size_t replicas_axis = o.sub_partitions.empty()
                                       ? o.partitions.size()
                                       : 2 * o.partitions.size();
      std::vector<int32_t> sorted = o.axis_order;
      std::sort(sorted.begin(), sorted.end());
      for (size_t i = 0; i < sorted.size(); ++i) {
        if (sorted.size() != replicas_axis + 1 ||
            sorted[i] != static_cast<int32_t>(i)) {
          return Fail("order must list each grid axis 0.." +
                      std::to_string(replicas_axis) + " once (axis " +
                      std::to_string(replicas_axis) + " = replicas)");
        }
      }
    }
    return o;
  }

  const std::string& error() const { return error_; }

 private:
  size_t Position() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t'))
      ++pos_;
    return pos_;
  }
  std::string_view Word() {
    const size_t begin = Position();
    while (pos_ < text_.size() &&
           ((text_[pos_] >= 'a' && text_[pos_] <= 'z') || text_[pos_] == '_'))
      ++pos_;
    return text_.substr(begin, pos_ - begin);
  }
  bool Accept(char c) {
    if (Position() < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool Expect(char c) {
    if (Accept(c)) return true;
    Fail(std::string("expected '") + c + "'");
    return false;
  }
  // A decimal integer in [0, INT32_MAX].
  bool Number(int64_t* value) {
    const size_t begin = Position();
    size_t end = begin;
    while (end < text_.size() && text_[end] >= '0' && text_[end] <= '9') ++end;
    if (end == begin) {
      Fail("expected a non-negative integer");
      return false;
    }
    const auto [ptr, ec] =
        std::from_chars(text_.data() + begin, text_.data() + end, *value);
    if (ec != std::errc() || *value > std::numeric_limits<int32_t>::max()) {
      Fail("number too large");
      return false;
    }
    pos_ = end;
    return true;
  }
  std::nullopt_t Fail(const std::string& what) {
    if (error_.empty()) {
      error_ = "bad ownership \"" + std::string(text_) + "\": " + what +
               " at offset " + std::to_string(pos_);
    }
    return std::nullopt;
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::string error_;
};
}  // namespace

std::string OwnershipText(const fb::OwnershipT& o) {
  std::string out;
  if (o.kind == fb::OwnershipKind::Blocked) {
    out = "blocked(";
    for (size_t i = 0; i < o.partitions.size(); ++i) {
      if (i) out += "x";
      out += std::to_string(o.partitions[i]);
    }
    if (!o.sub_partitions.empty()) {
      out += ", sub=";
      for (size_t i = 0; i < o.sub_partitions.size(); ++i) {
        if (i) out += "x";
        out += std::to_string(o.sub_partitions[i]);
      }
    }
    if (o.replicas != 1) out += ", rep=" + std::to_string(o.replicas);
    bool natural = true;
    for (size_t i = 0; i < o.axis_order.size(); ++i) {
      natural = natural && o.axis_order[i] == static_cast<int>(i);
    }
    if (!natural) {
      out += ", order=";
      for (size_t i = 0; i < o.axis_order.size(); ++i) {
        if (i) out += ",";
        out += std::to_string(o.axis_order[i]);
      }
    }
  } else {
    out = "flat(grain=" + std::to_string(o.grain) +
          ", tiles=" + std::to_string(o.tiles);
  }
  if (o.first_tile != 0) out += ", first=" + std::to_string(o.first_tile);
  if (o.tile_stride != 1) out += ", stride=" + std::to_string(o.tile_stride);
  return out + ")";
}

std::optional<fb::OwnershipT> ParseOwnershipText(std::string_view text,
                                                 std::string* error) {
  OwnershipParser parser(text);
  std::optional<fb::OwnershipT> o = parser.Parse();
  if (!o && error != nullptr) *error = parser.error();
  return o;
}

}  // namespace tilec::ir
