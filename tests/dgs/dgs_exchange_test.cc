#include "tests/dgs/dgs_util.h"
