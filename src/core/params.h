#pragma once
// Every SLUICE_* environment switch, declared once (core/params.cpp's table) and read through one
// accessor per kind, NCCL_PARAM's habit: the name, kind, default, allowed values, what it does and
// who it is for live in one place, `sluice params` lists them, and a name not in the table throws,
// so an undeclared switch cannot be read (tests/unit/test_params.cpp also scans src/ for quoted
// "SLUICE_..." names that the table lacks).
//
// Unset or empty is the default.  A bad value (an on/off switch not 0 or 1, an integer out of its
// range, a value not in an enum's list) is a UsageError naming the variable and what it takes.
// Switches marked Read::AtUse are read from the environment at each call: the tests set some of them
// around one engine or one prepared graph (a scoped setenv).  Read::Once ones keep the value of their
// first read for the whole process, as their readers always did.
#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

enum class ParamKind { On, Int, Double, Enum, Text };
enum class ParamClass {
  User,      // for users: documented behaviour (SLUICE_LOG_LEVEL, SLUICE_LOCK_WAIT_S)
  Test,      // for the tests: fakes or forces something no user needs
  Measure    // a measurement toggle: turns an engine path or graph pass off (or forces it) to compare
};
enum class ParamRead { AtUse, Once };

struct Param {
  const char* name;
  ParamKind kind;
  ParamClass cls;
  ParamRead read;
  const char* def;          // the default as text: "1", "0", "120", "auto"
  const char* values;       // Enum: the allowed values, '|'-separated; Int/Double: "min..max" (either
                            // end may be empty); Text: what it takes, in words
  const char* description;  // one line
  bool (*valid)(const std::string&) = nullptr;   // Text: the check of a value
};

// The whole table, in its order (for `sluice params` and the tests).
const std::vector<Param>& params();
// The entry of `name`; throws a sluice::Error (an internal error: the code names a switch the table
// does not declare) when there is none.
const Param& param(const std::string& name);

// The accessors: the environment's value, or the default when unset or empty.  Each throws an Error
// for an undeclared name or one of another kind, and a UsageError for a bad value.
bool param_on(const char* name);
int64_t param_int(const char* name);
double param_double(const char* name);
std::string param_string(const char* name);   // Enum (one of the allowed values) and Text

// Checks `value` against the entry (the accessors' own check): throws the UsageError they would.
void check_param_value(const Param& p, const std::string& value);
// Kind, class and read mode as words ("on/off", "measure", "once").
const char* param_kind_name(ParamKind k);
const char* param_class_name(ParamClass c);

}  // namespace sluice
