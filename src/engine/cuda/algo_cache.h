#pragma once
// The algorithm cache's file logic lives beside the engines (engine/algo_cache.h), built with every
// backend so that its tests need no GPU.
#include "engine/algo_cache.h"
