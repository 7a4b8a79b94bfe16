// circlerope — the name the rotation's header had before it became circlerope/rotary.h.
// Code written against that name keeps compiling; new code includes circlerope/rotary.h.
#pragma once

#include "circlerope/rotary.h"
