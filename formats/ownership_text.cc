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
    if (!Kind(&o.kind) || !Expect('(')) return std::nullopt;
    if (o.kind == OwnershipKind::Blocked &&
        !Counts("a partition count", &o.partitions)) {
      return std::nullopt;
    }
    if (!Options(&o) || !Complete(o)) return std::nullopt;
    return o;
  }

  const std::string& error() const { return error_; }

 private:
  // The options given so far: each may be given once.
  struct Seen {
    bool grain = false, tiles = false, rep = false, first = false,
         stride = false, order = false;
  };

  // "blocked" or "flat".
  bool Kind(OwnershipKind* kind) {
    std::string_view word = Word();
    if (word == "blocked") {
      *kind = OwnershipKind::Blocked;
    } else if (word == "flat") {
      *kind = OwnershipKind::Flat;
    } else {
      Fail(word.empty() ? "expected 'blocked' or 'flat'"
                        : "unknown ownership kind '" + std::string(word) + "'");
      return false;
    }
    return true;
  }

  // Per-axis counts joined by 'x' ("9x6"), each at least 1.
  bool Counts(const char* what, std::vector<int32_t>* counts) {
    do {
      if (counts->size() == kMaxRank) {
        Fail("more than " + std::to_string(kMaxRank) + " axes");
        return false;
      }
      int64_t parts;
      if (!Number(&parts)) return false;
      if (parts < 1) {
        Fail(std::string(what) + " must be at least 1");
        return false;
      }
      counts->push_back(static_cast<int32_t>(parts));
    } while (Accept('x'));
    return true;
  }

  // The options up to the closing ')', comma-separated (blocked's first
  // option also follows a comma, after the partition counts).
  bool Options(fb::OwnershipT* o) {
    bool need_comma = o->kind == OwnershipKind::Blocked;
    while (!Accept(')')) {
      if (need_comma && !Expect(',')) return false;
      need_comma = true;
      if (!Option(o)) return false;
    }
    return true;
  }

  // One `key=value` option.
  bool Option(fb::OwnershipT* o) {
    const size_t key_at = Position();
    const std::string_view key = Word();
    if (key == "order" && o->kind == OwnershipKind::Blocked) {
      if (seen_.order) {
        pos_ = key_at;
        Fail("option 'order' given twice");
        return false;
      }
      seen_.order = true;
      return Expect('=') && AxisOrder(&o->axis_order);
    }
    if (key == "sub" && o->kind == OwnershipKind::Blocked) {
      if (!o->sub_partitions.empty()) {
        pos_ = key_at;
        Fail("option 'sub' given twice");
        return false;
      }
      return Expect('=') &&
             Counts("a sub-partition count", &o->sub_partitions);
    }
    return CountOption(key_at, key, o);
  }

  // A comma-separated list of axes. Commas also separate options, so a
  // comma followed by a digit continues the list and one followed by
  // anything else ends it (and stands for the option separator).
  bool AxisOrder(std::vector<int32_t>* order) {
    while (true) {
      if (order->size() > 2 * kMaxRank) {
        Fail("order lists more than " + std::to_string(2 * kMaxRank + 1) +
             " axes");
        return false;
      }
      int64_t axis;
      if (!Number(&axis)) return false;
      order->push_back(static_cast<int32_t>(axis));
      const size_t before = pos_;
      if (!Accept(',')) break;
      if (Position() < text_.size() && text_[pos_] >= '0' &&
          text_[pos_] <= '9') {
        continue;
      }
      pos_ = before;  // the separator of the next option
      break;
    }
    return true;
  }

  // rep, grain, tiles, first or stride: one number, given once.
  bool CountOption(size_t key_at, std::string_view key, fb::OwnershipT* o) {
    int32_t* field = nullptr;
    bool* seen = nullptr;
    int64_t minimum = 1;
    if (key == "rep" && o->kind == OwnershipKind::Blocked) {
      field = &o->replicas, seen = &seen_.rep;
    } else if (key == "grain" && o->kind == OwnershipKind::Flat) {
      field = &o->grain, seen = &seen_.grain;
    } else if (key == "tiles" && o->kind == OwnershipKind::Flat) {
      field = &o->tiles, seen = &seen_.tiles;
    } else if (key == "first") {
      field = &o->first_tile, seen = &seen_.first, minimum = 0;
    } else if (key == "stride") {
      field = &o->tile_stride, seen = &seen_.stride;
    } else {
      pos_ = key_at;
      if (key.empty()) {
        Fail("expected an option name");
        return false;
      }
      Fail("unknown option '" + std::string(key) + "' for " +
           (o->kind == OwnershipKind::Blocked ? "blocked" : "flat") +
           " (options: " +
           (o->kind == OwnershipKind::Blocked
                ? "sub, rep, order, first, stride"
                : "grain, tiles, first, stride") +
           ")");
      return false;
    }
    if (*seen) {
      pos_ = key_at;
      Fail("option '" + std::string(key) + "' given twice");
      return false;
    }
    *seen = true;
    if (!Expect('=')) return false;
    const size_t value_at = Position();
    int64_t value;
    if (!Number(&value)) return false;
    if (value < minimum) {
      pos_ = value_at;
      Fail(std::string(key) + " must be at least " + std::to_string(minimum));
      return false;
    }
    *field = static_cast<int32_t>(value);
    return true;
  }

  // What the whole text must satisfy once every option is read.
  bool Complete(const fb::OwnershipT& o) {
    if (o.kind == OwnershipKind::Flat && (!seen_.grain || !seen_.tiles)) {
      Fail(std::string("flat needs ") + (seen_.grain ? "" : "grain=") +
           (!seen_.grain && !seen_.tiles ? " and " : "") +
           (seen_.tiles ? "" : "tiles="));
      return false;
    }
    if (Position() != text_.size()) {
      Fail("unexpected text after the closing ')'");
      return false;
    }
    if (!o.sub_partitions.empty() &&
        o.sub_partitions.size() != o.partitions.size()) {
      Fail("sub= needs one count per axis");
      return false;
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
          Fail("order must list each grid axis 0.." +
               std::to_string(replicas_axis) + " once (axis " +
               std::to_string(replicas_axis) + " = replicas)");
          return false;
        }
      }
    }
    return true;
  }

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
  Seen seen_;
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
