// Compiled against io's view of src/ (build/module-includes/io): the engine is a floor above io,
// so this include must not be found (the ctest expects the compile to fail).
#include "engine/engine.h"
