#include "model/einsum.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace sluice {

namespace {

// One operand's term: its letters, and where the ellipsis stands (-1: none).
struct Term {
  std::string letters;
  int ellipsis = -1;
};

Term parse_term(const std::string& s, const std::string& where) {
  Term t;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == ' ') continue;
    if (c == '.') {
      if (t.ellipsis >= 0 || s.compare(i, 3, "...") != 0) throw InputError(str(where, "malformed ellipsis in '", s, "'"));
      t.ellipsis = static_cast<int>(t.letters.size());
      i += 2;
      continue;
    }
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')))
      throw InputError(str(where, "einsum label '", c, "' is not a letter"));
    t.letters.push_back(c);
  }
  return t;
}

}  // namespace

EinsumSpec parse_einsum(const std::string& equation, const std::vector<Shape>& shapes, const std::string& where) {
  const std::size_t arrow = equation.find("->");
  const std::string lhs = equation.substr(0, arrow);
  std::vector<Term> terms;
  for (std::size_t b = 0;;) {
    const std::size_t e = lhs.find(',', b);
    terms.push_back(parse_term(lhs.substr(b, e == std::string::npos ? std::string::npos : e - b), where));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  if (terms.size() != shapes.size())
    throw InputError(str(where, "the equation '", equation, "' names ", terms.size(), " operands but the node has ",
                         shapes.size()));
  EinsumSpec spec;
  std::map<char, int> ids;
  std::map<int, int64_t> size;
  auto label = [&](char c) {
    auto it = ids.find(c);
    if (it != ids.end()) return it->second;
    return ids[c] = spec.labels++;
  };
  // Ellipsis dimensions get labels of their own, aligned on the right across operands.
  std::size_t ell_rank = 0;
  for (std::size_t k = 0; k < terms.size(); ++k) {
    const std::size_t named = terms[k].letters.size();
    if (terms[k].ellipsis < 0) {
      if (shapes[k].size() != named)
        throw InputError(str(where, "operand ", k, " ", shape_str(shapes[k]), " does not have the ", named,
                             " axes its term '", terms[k].letters, "' names"));
    } else {
      if (shapes[k].size() < named)
        throw InputError(str(where, "operand ", k, " ", shape_str(shapes[k]), " has fewer axes than its term names"));
      ell_rank = std::max(ell_rank, shapes[k].size() - named);
    }
  }
  std::vector<int> ell_ids(ell_rank);
  for (std::size_t i = 0; i < ell_rank; ++i) ell_ids[i] = spec.labels++;
  std::vector<int64_t> ell_size(ell_rank, 1);
  std::map<int, int> count;
  for (std::size_t k = 0; k < terms.size(); ++k) {
    std::vector<int> axes;
    const Term& t = terms[k];
    const std::size_t er = t.ellipsis < 0 ? 0 : shapes[k].size() - t.letters.size();
    for (std::size_t i = 0; i <= t.letters.size(); ++i) {
      if (static_cast<int>(i) == t.ellipsis)
        for (std::size_t j = 0; j < er; ++j) {
          const std::size_t e = ell_rank - er + j;
          const int64_t d = shapes[k][axes.size()];
          if (d != 1 && ell_size[e] != 1 && d != ell_size[e])
            throw InputError(str(where, "the ellipsis dimensions of the operands do not broadcast"));
          if (d != 1) ell_size[e] = d;
          axes.push_back(ell_ids[e]);
        }
      if (i == t.letters.size()) break;
      const int id = label(t.letters[i]);
      const int64_t d = shapes[k][axes.size()];
      auto it = size.find(id);
      if (it != size.end() && it->second != d)
        throw InputError(str(where, "label '", t.letters[i], "' has size ", it->second, " in one operand and ", d,
                             " in another"));
      size[id] = d;
      if (std::find(axes.begin(), axes.end(), id) == axes.end()) ++count[id];
      axes.push_back(id);
    }
    spec.inputs.push_back(std::move(axes));
  }
  if (arrow == std::string::npos) {
    // Implicit output: the ellipsis, then the letters used once, alphabetically.
    for (int e : ell_ids) spec.output.push_back(e);
    for (const auto& kv : ids)
      if (count[kv.second] == 1) spec.output.push_back(kv.second);
  } else {
    const Term out = parse_term(equation.substr(arrow + 2), where);
    for (std::size_t i = 0; i <= out.letters.size(); ++i) {
      if (static_cast<int>(i) == out.ellipsis)
        for (int e : ell_ids) spec.output.push_back(e);
      if (i == out.letters.size()) break;
      auto it = ids.find(out.letters[i]);
      if (it == ids.end()) throw InputError(str(where, "output label '", out.letters[i], "' is in no operand"));
      if (std::find(spec.output.begin(), spec.output.end(), it->second) != spec.output.end())
        throw InputError(str(where, "output label '", out.letters[i], "' is repeated"));
      spec.output.push_back(it->second);
    }
    if (out.ellipsis < 0 && ell_rank > 0) {
      for (int64_t d : ell_size)
        if (d != 1) throw InputError(str(where, "the output drops the ellipsis dimensions (summing them is not supported)"));
    }
  }
  spec.sizes.assign(static_cast<std::size_t>(spec.labels), 1);
  for (const auto& kv : size) spec.sizes[static_cast<std::size_t>(kv.first)] = kv.second;
  for (std::size_t i = 0; i < ell_rank; ++i) spec.sizes[static_cast<std::size_t>(ell_ids[i])] = ell_size[i];
  return spec;
}

}  // namespace sluice
