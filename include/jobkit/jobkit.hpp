#pragma once

#include "jobkit/config.hpp"
#include "jobkit/error.hpp"
#include "jobkit/identity.hpp"
#include "jobkit/log.hpp"
#include "jobkit/runtime.hpp"
