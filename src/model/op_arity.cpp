#include "model/op_arity.h"

#include "core/error.h"
#include "model/graph_util.h"
#include "model/shape_inference.h"

namespace sluice {

namespace {

// "1 input", "2 inputs", "2 to 3 inputs", "at least 1 input"
std::string count_text(std::size_t lo, std::size_t hi, const char* what) {
  const std::string one(what), many = one + "s";
  if (lo == hi) return str(lo, " ", lo == 1 ? one : many);
  if (hi == kVariadic) return str("at least ", lo, " ", lo == 1 ? one : many);
  return str(lo, " to ", hi, " ", many);
}

}  // namespace

std::string op_key(const std::string& domain, const std::string& op) {
  return domain.empty() || domain == "ai.onnx" ? op : domain + "." + op;
}

const OpArity* op_arity(const std::string& domain, const std::string& op) {
  return shape_rule_arity(op_key(domain, op));  // another domain's op has no row
}

void check_node_has_output(const Graph& g, const Node& n) {
  if (n.outputs.empty() || n.outputs[0].empty())
    throw InputError(str(node_context(g, n), "the node has no (named) output"));
}

void check_node_arity(const Graph& g, const Node& n) {
  const OpArity* a = op_arity(n.domain, n.op);
  if (!a) return;
  const std::size_t ni = n.inputs.size(), no = n.outputs.size();
  if (ni < a->min_in || ni > a->max_in)
    throw InputError(str(node_context(g, n), "has ", ni, " input", ni == 1 ? "" : "s", "; ", n.op, " takes ",
                         count_text(a->min_in, a->max_in, "input")));
  for (std::size_t i = 0; i < a->min_in; ++i)
    if (n.inputs[i].empty())
      throw InputError(str(node_context(g, n), "input ", i, " is required but left empty"));
  if (no < a->min_out || no > a->max_out)
    throw InputError(str(node_context(g, n), "has ", no, " output", no == 1 ? "" : "s", "; ", n.op, " gives ",
                         count_text(a->min_out, a->max_out, "output")));
  check_node_has_output(g, n);
}

}  // namespace sluice
