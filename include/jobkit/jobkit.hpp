#pragma once

#include "jobkit/checkpoints.hpp"
#include "jobkit/collectives.hpp"
#include "jobkit/config.hpp"
#include "jobkit/error.hpp"
#include "jobkit/helpers.hpp"
#include "jobkit/identity.hpp"
#include "jobkit/log.hpp"
#include "jobkit/preemption.hpp"
#include "jobkit/runtime.hpp"
#include "jobkit/serialize.hpp"
#include "jobkit/timeout.hpp"
#include "jobkit/workspace.hpp"
