// Compiled against io's view of src/ (build/module-includes/io): a floor below io is there.
#include "core/error.h"
#include "io/source.h"
