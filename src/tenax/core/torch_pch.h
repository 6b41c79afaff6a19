// Precompiled header for every target that uses libtorch (see CMakeLists.txt). Only headers that
// are both heavy and stable belong here.
#pragma once
#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/generated/variable_factories.h>
