// Post-processors: TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel (ids
// unchanged), Sequence.  Only the single-sequence template is used: one passage is one sequence.
#include <utility>

#include "core/error.h"
#include "text/components.h"

namespace sluice::text::detail {

using nlohmann::json;

namespace {

// The ids before and after the sequence.
class Wrap : public PostProcessor {
 public:
  Wrap(std::vector<int32_t> before, std::vector<int32_t> after, std::string name)
      : before_(std::move(before)), after_(std::move(after)), name_(std::move(name)) {}
  std::size_t added() const override { return before_.size() + after_.size(); }
  void apply(std::vector<int32_t>& ids, Scratch& sc) const override {
    if (before_.empty() && after_.empty()) return;
    sc.ids2.clear();
    sc.ids2.insert(sc.ids2.end(), before_.begin(), before_.end());
    sc.ids2.insert(sc.ids2.end(), ids.begin(), ids.end());
    sc.ids2.insert(sc.ids2.end(), after_.begin(), after_.end());
    ids.swap(sc.ids2);
  }
  std::string name() const override { return name_; }

 private:
  std::vector<int32_t> before_, after_;
  std::string name_;
};

class SequencePost : public PostProcessor {
 public:
  explicit SequencePost(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  std::size_t added() const override {
    std::size_t n = 0;
    for (const auto& p : parts_) n += p->added();
    return n;
  }
  void apply(std::vector<int32_t>& ids, Scratch& sc) const override {
    for (const auto& p : parts_) p->apply(ids, sc);
  }
  std::string name() const override {
    std::string n = "Sequence[";
    for (std::size_t i = 0; i < parts_.size(); ++i) n += (i ? ", " : "") + parts_[i]->name();
    return n + "]";
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

// ["[SEP]", 102] -> 102
int32_t token_pair_id(const json& j, const char* key, const std::string& where) {
  const json& v = field(j, key, where);
  if (!v.is_array() || v.size() != 2 || !v[1].is_number_integer())
    throw InputError(str(where, ": \"", key, "\" is ", v.dump(), ", not [token, id]"));
  return v[1].get<int32_t>();
}

std::unique_ptr<PostProcessor> template_processing(const json& j, const std::string& at) {
  const json& single = field(j, "single", at);
  if (!single.is_array()) throw InputError(str(at, ": \"single\" is not a list"));
  const json* specials = j.contains("special_tokens") ? &j["special_tokens"] : nullptr;
  std::vector<int32_t> before, after;
  bool seen_a = false;
  for (const json& item : single) {
    if (item.contains("Sequence")) {
      const std::string id = string_field(item["Sequence"], "id", at, "A");
      if (id != "A") throw InputError(str(at, ": the single template names sequence ", id, ", not A"));
      if (seen_a) throw InputError(str(at, ": the single template names sequence A twice"));
      seen_a = true;
    } else if (item.contains("SpecialToken")) {
      const std::string name = string_field(item["SpecialToken"], "id", at, "");
      if (!specials || !specials->contains(name))
        throw InputError(str(at, ": the special token \"", name, "\" of the template is not in \"special_tokens\""));
      const json& ids = field((*specials)[name], "ids", at);
      if (!ids.is_array()) throw InputError(str(at, ": the ids of \"", name, "\" are not a list"));
      for (const json& id : ids) {
        if (!id.is_number_integer()) throw InputError(str(at, ": an id of \"", name, "\" is not an integer"));
        (seen_a ? after : before).push_back(id.get<int32_t>());
      }
    } else {
      throw InputError(str(at, ": template item ", item.dump(), " is neither a Sequence nor a SpecialToken"));
    }
  }
  if (!seen_a) throw InputError(str(at, ": the single template has no sequence A"));
  return std::make_unique<Wrap>(std::move(before), std::move(after), "TemplateProcessing");
}

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const json& j, const std::string& where) {
  if (!j.is_object()) throw InputError(str(where, " is not an object"));
  const std::string type = string_field(j, "type", where, "");
  const std::string at = str(where, " ", type);
  if (type == "TemplateProcessing") return template_processing(j, at);
  if (type == "BertProcessing" || type == "RobertaProcessing")
    return std::make_unique<Wrap>(std::vector<int32_t>{token_pair_id(j, "cls", at)}, std::vector<int32_t>{token_pair_id(j, "sep", at)}, type);
  if (type == "ByteLevel") return std::make_unique<Wrap>(std::vector<int32_t>{}, std::vector<int32_t>{}, type);
  if (type == "Sequence") {
    const json& list = field(j, "processors", at);
    if (!list.is_array()) throw InputError(str(at, ": \"processors\" is not a list"));
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (std::size_t i = 0; i < list.size(); ++i) parts.push_back(make_post_processor(list[i], str(at, "[", i, "]")));
    return std::make_unique<SequencePost>(std::move(parts));
  }
  throw InputError(str(where, ": the post-processor type \"", type, "\" is not supported"),
                   "supported: TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, Sequence");
}

}  // namespace sluice::text::detail
