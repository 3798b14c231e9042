#include "app/text_model.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "io/source.h"

namespace sluice {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// A JSON file of the model folder, or null when absent; UsageError when it is there but unreadable.
json read_json(const fs::path& p, std::vector<std::string>& files) {
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return json();
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in && !in.eof()) throw UsageError(str("cannot read ", p.string()));
  try {
    json j = json::parse(ss.str());
    files.push_back(p.filename().string());
    return j;
  } catch (const json::parse_error& e) {
    throw UsageError(str(p.string(), " is not JSON (", e.what(), ")"), "repair or remove the file, or give the options yourself");
  }
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The model folder: the model file's, or the one above an onnx/ folder that holds no configuration.
fs::path model_folder(const std::string& model) {
  fs::path dir = fs::path(model).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  const bool here = fs::exists(dir / "modules.json", ec) || fs::exists(dir / "tokenizer.json", ec);
  if (!here && dir.filename() == "onnx" && dir.has_parent_path()) return dir.parent_path();
  return dir;
}

// The pooling modes of a Pooling module's config.json, in sentence-transformers' names.
std::vector<std::string> pooling_modes(const json& c, const std::string& file) {
  std::vector<std::string> modes;
  if (c.contains("pooling_mode")) {
    const json& m = c.at("pooling_mode");
    if (m.is_string()) modes.push_back(m.get<std::string>());
    else if (m.is_array())
      for (const json& x : m)
        if (x.is_string()) modes.push_back(x.get<std::string>());
  }
  static const std::pair<const char*, const char*> flags[] = {
      {"pooling_mode_cls_token", "cls"},
      {"pooling_mode_max_tokens", "max"},
      {"pooling_mode_mean_tokens", "mean"},
      {"pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len_tokens"},
      {"pooling_mode_weightedmean_tokens", "weightedmean"},
      {"pooling_mode_lasttoken", "lasttoken"}};
  for (const auto& [key, mode] : flags)
    if (c.contains(key) && c.at(key).is_boolean() && c.at(key).get<bool>() &&
        std::find(modes.begin(), modes.end(), mode) == modes.end())
      modes.push_back(mode);
  if (modes.empty())
    throw UsageError(str(file, " names no pooling mode"), "give --pooling cls|mean|max|lasttoken|weightedmean|mean_sqrt_len_tokens");
  return modes;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

}  // namespace

bool text_input_job(const JobConfig& job) {
  const std::string kind = job.input_kind == "auto" ? detect_input_kind(job.input) : job.input_kind;
  return kind == "jsonl" || kind == "csv" || kind == "tsv" || kind == "text";
}

TextModelFrom apply_text_model(JobConfig& job, const std::vector<std::string>& given) {
  TextModelFrom t;
  const auto is_given = [&](const char* o) { return std::find(given.begin(), given.end(), o) != given.end(); };
  const auto set = [&](const char* option, const std::string& value) { t.chosen.emplace_back(option, value); };
  const fs::path dir = model_folder(job.model);
  t.folder = dir.string();

  // The tokenizer: --tokenizer, else the folder's tokenizer.json.
  if (job.tokenizer.empty()) {
    std::error_code ec;
    const fs::path tok = dir / "tokenizer.json";
    if (!fs::is_regular_file(tok, ec))
      throw UsageError(str("the input is text, and no tokenizer.json lies beside the model (in ", dir.string(), ")"),
                       "give --tokenizer PATH (a tokenizer.json, or a model folder holding one)");
    job.tokenizer = tok.string();
    set("tokenizer", job.tokenizer);
  }

  const json modules = read_json(dir / "modules.json", t.files);
  bool has_normalize = false, has_pooling = false, include_prompt = true;
  std::vector<std::string> pooling;
  if (modules.is_array()) {
    bool after_pooling = false;
    for (const json& m : modules) {
      if (!m.is_object()) continue;
      const std::string type = m.value("type", std::string());
      const std::string path = m.value("path", std::string());
      if (ends_with(type, "Pooling")) {
        const fs::path cfg = dir / path / "config.json";
        std::vector<std::string> seen;
        const json c = read_json(cfg, seen);
        if (c.is_null()) throw UsageError(str("modules.json names a Pooling module in ", (dir / path).string(), " but it holds no config.json"),
                                          "give --pooling");
        t.files.push_back((fs::path(path) / "config.json").string());
        pooling = pooling_modes(c, cfg.string());
        include_prompt = c.value("include_prompt", true);
        has_pooling = after_pooling = true;
      } else if (ends_with(type, "Normalize")) {
        has_normalize = true;
      } else if (ends_with(type, "Transformer")) {
        continue;
      } else if (after_pooling || !has_pooling) {
        t.warnings.push_back(str("modules.json has a ", type.empty() ? std::string("module") : type, " module (", path,
                                 ") that Sluice does not apply; the embeddings differ from sentence-transformers' unless "
                                 "the ONNX file holds it"));
      }
    }
  }
  if (!is_given("pooling")) {
    job.pooling = has_pooling ? pooling : std::vector<std::string>{"mean"};
    set("pooling", joined(job.pooling) + (has_pooling ? "" : " (no sentence-transformers Pooling module found)"));
  }
  if (!is_given("normalize") && modules.is_array()) {
    job.normalize = has_normalize;
    set("normalize", has_normalize ? "true" : "false");
  }

  // The sequence length.
  const json sbert = read_json(dir / "sentence_bert_config.json", t.files);
  const json tok_cfg = read_json(dir / "tokenizer_config.json", t.files);
  const json config = read_json(dir / "config.json", t.files);
  if (sbert.is_object() && sbert.value("do_lower_case", false))
    t.warnings.push_back("sentence_bert_config.json sets do_lower_case, which Sluice does not apply: lowercase the passages, "
                         "or use a tokenizer.json that lowercases");
  if (config.is_object() && config.contains("pad_token_id") && config.at("pad_token_id").is_number_integer())
    t.pad_token_id = config.at("pad_token_id").get<int32_t>();
  if (!is_given("max-length") && job.max_length == 0) {
    int64_t n = 0;
    std::string from;
    if (sbert.is_object() && sbert.contains("max_seq_length") && sbert.at("max_seq_length").is_number_integer()) {
      n = sbert.at("max_seq_length").get<int64_t>();
      from = "sentence_bert_config.json";
    } else if (tok_cfg.is_object() && tok_cfg.contains("model_max_length") && tok_cfg.at("model_max_length").is_number_integer() &&
               tok_cfg.at("model_max_length").get<int64_t>() < 1000000) {
      n = tok_cfg.at("model_max_length").get<int64_t>();
      from = "tokenizer_config.json";
    }
    if (config.is_object() && config.contains("max_position_embeddings") && config.at("max_position_embeddings").is_number_integer()) {
      // RoBERTa-style models number positions from pad_token_id + 1: two fewer tokens fit.
      int64_t limit = config.at("max_position_embeddings").get<int64_t>();
      const std::string type = config.value("model_type", std::string());
      if (type == "roberta" || type == "xlm-roberta" || type == "camembert") limit -= 2;
      if (n == 0 || limit < n) {
        n = limit;
        from = "config.json";
      }
    }
    if (n > 0) {
      job.max_length = n;
      set("max-length", str(n, " (", from, ")"));
    }
  }

  // The prompt.
  const json st = read_json(dir / "config_sentence_transformers.json", t.files);
  if (!is_given("prompt")) {
    std::string name = job.prompt_name;
    if (name.empty() && st.is_object() && st.contains("default_prompt_name") && st.at("default_prompt_name").is_string())
      name = st.at("default_prompt_name").get<std::string>();
    if (!name.empty()) {
      const json* prompts = st.is_object() && st.contains("prompts") && st.at("prompts").is_object() ? &st.at("prompts") : nullptr;
      if (!prompts || !prompts->contains(name) || !prompts->at(name).is_string()) {
        std::string names;
        if (prompts)
          for (auto it = prompts->begin(); it != prompts->end(); ++it) names += (names.empty() ? "" : ", ") + it.key();
        throw UsageError(str("--prompt-name ", name, ": config_sentence_transformers.json in ", dir.string(), " has no such prompt",
                             names.empty() ? std::string() : " (it has " + names + ")"),
                         "give one of its prompts' names, or the text with --prompt");
      }
      job.prompt = prompts->at(name).get<std::string>();
      set("prompt", str("\"", job.prompt, "\" (prompt ", name, ")"));
    }
  } else if (!job.prompt_name.empty()) {
    throw UsageError("--prompt and --prompt-name both given", "give one of them");
  }
  if (!include_prompt && !job.prompt.empty())
    throw UsageError(str("the Pooling module of ", dir.string(), " leaves the prompt's tokens out of the pooling "
                         "(include_prompt false), which Sluice does not do yet"),
                     "run without a prompt, or with a model whose pooling includes it");
  if (!t.files.empty() || !t.chosen.empty()) return t;
  t.folder.clear();
  return t;
}

std::string text_model_summary(const JobConfig& job, const TextModelFrom& t) {
  std::string s = str("pooling ", joined(job.pooling), job.normalize ? ", L2-normalized" : ", not normalized", ", ");
  s += job.max_length > 0 ? str("at most ", job.max_length, " tokens") : std::string("the model's sequence length");
  s += job.prompt.empty() ? ", no prompt" : str(", prompt \"", job.prompt, "\"");
  s += str(", tokenizer ", job.tokenizer);
  if (!t.files.empty()) {
    std::string f;
    for (const auto& x : t.files) f += (f.empty() ? "" : ", ") + x;
    s += str(" (from ", t.folder, ": ", f, ")");
  }
  return s;
}

}  // namespace sluice
