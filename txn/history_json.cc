// The JSON-lines history format (see history.h): a minimal JSON reader and the schema on top.
#include <algorithm>
#include <cctype>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "txn/history.h"

namespace farm {
namespace txn {
namespace {

// ---------------------------------------------------------------------------------------------
// A minimal JSON reader: enough of RFC 8259 to read one history line into a tree. Numbers keep
// their literal text; the schema code below decides which ones it accepts.

struct JsonValue {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  std::string text;  // a number's literal, or a string's decoded contents
  std::vector<JsonValue> items;
  std::vector<std::pair<std::string, JsonValue>> members;
};

class JsonReader {
 public:
  explicit JsonReader(absl::string_view s) : s_(s) {}

  absl::StatusOr<JsonValue> ReadDocument() {
    JsonValue v;
    if (absl::Status s = Read(&v, 0); !s.ok()) return s;
    SkipSpace();
    if (pos_ != s_.size()) return Error("unexpected text after the JSON value");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 32;

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("column ", pos_ + 1, ": ", what));
  }
  void SkipSpace() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\r' || s_[pos_] == '\n')) {
      ++pos_;
    }
  }
  bool Consume(char c) {
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool Digit() const { return pos_ < s_.size() && std::isdigit(static_cast<uint8_t>(s_[pos_])); }

  absl::Status Read(JsonValue* v, int depth) {
    if (depth > kMaxDepth) return Error("nested too deeply");
    SkipSpace();
    if (pos_ >= s_.size()) return Error("unexpected end of line");
    char c = s_[pos_];
    if (c == '{') return ReadObject(v, depth);
    if (c == '[') return ReadArray(v, depth);
    if (c == '"') {
      v->type = JsonValue::Type::kString;
      return ReadString(&v->text);
    }
    if (c == '-' || std::isdigit(static_cast<uint8_t>(c))) return ReadNumber(v);
    for (auto [word, type] :
         {std::pair{"true", JsonValue::Type::kBool}, std::pair{"false", JsonValue::Type::kBool},
          std::pair{"null", JsonValue::Type::kNull}}) {
      if (absl::StartsWith(s_.substr(pos_), word)) {
        pos_ += strlen(word);
        v->type = type;
        v->text = word;
        return absl::OkStatus();
      }
    }
    return Error(absl::StrCat("unexpected character '", std::string(1, c), "'"));
  }

  absl::Status ReadObject(JsonValue* v, int depth) {
    ++pos_;
    v->type = JsonValue::Type::kObject;
    if (Consume('}')) return absl::OkStatus();
    while (true) {
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != '"') return Error("expected a member name");
      std::string name;
      if (absl::Status s = ReadString(&name); !s.ok()) return s;
      if (!Consume(':')) return Error("expected ':'");
      JsonValue member;
      if (absl::Status s = Read(&member, depth + 1); !s.ok()) return s;
      v->members.emplace_back(std::move(name), std::move(member));
      if (Consume(',')) continue;
      if (Consume('}')) return absl::OkStatus();
      return Error("expected ',' or '}'");
    }
  }

  absl::Status ReadArray(JsonValue* v, int depth) {
    ++pos_;
    v->type = JsonValue::Type::kArray;
    if (Consume(']')) return absl::OkStatus();
    while (true) {
      JsonValue item;
      if (absl::Status s = Read(&item, depth + 1); !s.ok()) return s;
      v->items.push_back(std::move(item));
      if (Consume(',')) continue;
      if (Consume(']')) return absl::OkStatus();
      return Error("expected ',' or ']'");
    }
  }

  absl::Status ReadString(std::string* out) {
    ++pos_;  // the opening quote
    while (pos_ < s_.size()) {
      char c = s_[pos_++];
      if (c == '"') return absl::OkStatus();
      if (static_cast<uint8_t>(c) < 0x20) return Error("control character in a string");
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) break;
      char e = s_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out->push_back(e);
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u':
          if (absl::Status s = ReadUnicodeEscape(out); !s.ok()) return s;
          break;
        default:
          return Error(absl::StrCat("bad escape '\\", std::string(1, e), "'"));
      }
    }
    return Error("unterminated string");
  }

  // After "\u": four hex digits (a surrogate pair takes two escapes), appended as UTF-8.
  absl::Status ReadUnicodeEscape(std::string* out) {
    auto hex4 = [this](uint32_t* cp) {
      if (pos_ + 4 > s_.size()) return false;
      *cp = 0;
      for (int i = 0; i < 4; ++i) {
        char h = s_[pos_++];
        if (!std::isxdigit(static_cast<uint8_t>(h))) return false;
        *cp = *cp * 16 + (std::isdigit(static_cast<uint8_t>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
      }
      return true;
    };
    uint32_t cp;
    if (!hex4(&cp)) return Error("bad \\u escape");
    if (cp >= 0xD800 && cp < 0xDC00) {
      uint32_t low;
      if (!absl::StartsWith(s_.substr(pos_), "\\u") || (pos_ += 2, !hex4(&low)) || low < 0xDC00 ||
          low >= 0xE000) {
        return Error("unpaired surrogate in a \\u escape");
      }
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    } else if (cp >= 0xDC00 && cp < 0xE000) {
      return Error("unpaired surrogate in a \\u escape");
    }
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    return absl::OkStatus();
  }

  absl::Status ReadNumber(JsonValue* v) {
    size_t begin = pos_;
    if (s_[pos_] == '-') ++pos_;
    if (!Digit()) return Error("bad number");
    if (s_[pos_] == '0') {
      ++pos_;
    } else {
      while (Digit()) ++pos_;
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (!Digit()) return Error("bad number");
      while (Digit()) ++pos_;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!Digit()) return Error("bad number");
      while (Digit()) ++pos_;
    }
    v->type = JsonValue::Type::kNumber;
    v->text = std::string(s_.substr(begin, pos_ - begin));
    return absl::OkStatus();
  }

  absl::string_view s_;
  size_t pos_ = 0;
};

// ---------------------------------------------------------------------------------------------
// The history schema on top of JsonValue.

absl::Status SchemaError(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

bool IsInteger(const JsonValue& v) {
  return v.type == JsonValue::Type::kNumber && v.text.find_first_of(".eE") == std::string::npos;
}

absl::StatusOr<uint64_t> ToUint64(const JsonValue& v, absl::string_view field) {
  uint64_t u;
  if (!IsInteger(v) || v.text[0] == '-') return SchemaError(field, "expected an unsigned integer");
  if (!absl::SimpleAtoi(v.text, &u)) return SchemaError(field, "out of range for uint64");
  return u;
}

absl::StatusOr<int64_t> ToInt64(const JsonValue& v, absl::string_view field) {
  int64_t i;
  if (!IsInteger(v)) return SchemaError(field, "expected an integer");
  if (!absl::SimpleAtoi(v.text, &i)) return SchemaError(field, "out of range for int64");
  return i;
}

absl::StatusOr<TxnOp> ToOp(const JsonValue& v, size_t index) {
  std::string field = absl::StrCat("ops[", index, "]");
  auto shape_error = [&] {
    return SchemaError(field, R"(expected ["r", key, value] or ["w", key, value(, prev)])");
  };
  if (v.type != JsonValue::Type::kArray || v.items.size() < 3 || v.items.size() > 4 ||
      v.items[0].type != JsonValue::Type::kString) {
    return shape_error();
  }
  const std::string& kind = v.items[0].text;
  if ((kind != "r" && kind != "w") || (kind == "r" && v.items.size() != 3)) return shape_error();
  absl::StatusOr<uint64_t> key = ToUint64(v.items[1], absl::StrCat(field, " key"));
  if (!key.ok()) return key.status();
  absl::StatusOr<uint64_t> value = ToUint64(v.items[2], absl::StrCat(field, " value"));
  if (!value.ok()) return value.status();
  if (kind == "r") return TxnOp::Read(*key, *value);
  std::optional<uint64_t> prev;
  if (v.items.size() == 4 && v.items[3].type != JsonValue::Type::kNull) {
    absl::StatusOr<uint64_t> p = ToUint64(v.items[3], absl::StrCat(field, " prev"));
    if (!p.ok()) return p.status();
    prev = *p;
  }
  return TxnOp::Write(*key, *value, prev);
}

absl::Status SetField(const std::string& name, const JsonValue& v, TxnRecord* t) {
  if (name == "client") {
    if (v.type != JsonValue::Type::kString && !IsInteger(v)) {
      return SchemaError(name, "expected an integer or a string");
    }
    t->client = v.text;
  } else if (name == "start" || name == "end") {
    absl::StatusOr<int64_t> ns = ToInt64(v, name);
    if (!ns.ok()) return ns.status();
    (name == "start" ? t->start_ns : t->end_ns) = *ns;
  } else if (name == "outcome") {
    if (v.text == "committed" && v.type == JsonValue::Type::kString) {
      t->outcome = TxnOutcome::kCommitted;
    } else if (v.text == "aborted" && v.type == JsonValue::Type::kString) {
      t->outcome = TxnOutcome::kAborted;
    } else if (v.text == "unknown" && v.type == JsonValue::Type::kString) {
      t->outcome = TxnOutcome::kUnknown;
    } else {
      return SchemaError(name, R"(expected "committed", "aborted" or "unknown")");
    }
  } else if (name == "ops") {
    if (v.type != JsonValue::Type::kArray) return SchemaError(name, "expected a list");
    for (size_t i = 0; i < v.items.size(); ++i) {
      absl::StatusOr<TxnOp> op = ToOp(v.items[i], i);
      if (!op.ok()) return op.status();
      t->ops.push_back(*op);
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown field \"", name, "\" (expected client, start, end, outcome and ops)"));
  }
  return absl::OkStatus();
}

void AppendJsonString(absl::string_view s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (static_cast<uint8_t>(c) < 0x20) {
      absl::StrAppend(out, "\\u00", absl::Hex(static_cast<uint8_t>(c), absl::kZeroPad2));
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

}  // namespace

absl::StatusOr<TxnRecord> ParseTxnRecordJson(absl::string_view line) {
  absl::StatusOr<JsonValue> doc = JsonReader(line).ReadDocument();
  if (!doc.ok()) return doc.status();
  if (doc->type != JsonValue::Type::kObject) {
    return absl::InvalidArgumentError("expected a JSON object");
  }
  static constexpr absl::string_view kRequired[] = {"client", "start", "end", "outcome", "ops"};
  TxnRecord t;
  std::vector<std::string> seen;
  for (const auto& [name, value] : doc->members) {
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) {
      return absl::InvalidArgumentError(absl::StrCat("field \"", name, "\" appears twice"));
    }
    seen.push_back(name);
    if (absl::Status s = SetField(name, value, &t); !s.ok()) return s;
  }
  for (absl::string_view name : kRequired) {
    if (std::find(seen.begin(), seen.end(), name) == seen.end()) {
      return absl::InvalidArgumentError(absl::StrCat("missing field \"", name, "\""));
    }
  }
  return t;
}

absl::StatusOr<History> ParseHistoryJsonLines(absl::string_view text) {
  History history;
  int64_t line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    absl::StatusOr<TxnRecord> t = ParseTxnRecordJson(line);
    if (!t.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_number, ": ", t.status().message()));
    }
    t->line = line_number;
    history.push_back(*std::move(t));
  }
  return history;
}

std::string TxnRecordToJson(const TxnRecord& t) {
  std::string out = "{\"client\":";
  AppendJsonString(t.client, &out);
  const char* outcome = t.outcome == TxnOutcome::kCommitted ? "committed"
                        : t.outcome == TxnOutcome::kAborted ? "aborted"
                                                            : "unknown";
  absl::StrAppend(&out, ",\"start\":", t.start_ns, ",\"end\":", t.end_ns, ",\"outcome\":\"",
                  outcome, "\",\"ops\":[");
  for (size_t i = 0; i < t.ops.size(); ++i) {
    const TxnOp& op = t.ops[i];
    absl::StrAppend(&out, i ? "," : "", op.kind == TxnOp::Kind::kRead ? "[\"r\"," : "[\"w\",",
                    op.key, ",", op.value);
    if (op.prev) absl::StrAppend(&out, ",", *op.prev);
    out.push_back(']');
  }
  out += "]}";
  return out;
}

}  // namespace txn
}  // namespace farm
