// One rank's connection as the step channel writes to it, in a header of
// its own so that a group member (which is one) does not include the
// channel.
#pragma once

#include <string>

#include "proto/encoded_step.h"

namespace moe {

// Represents one rank's connection, as the channel writes to it.
class StepRank {
 public:
  virtual ~StepRank() = default;
  // Returns false when the connection is gone (the step was not sent).
  virtual bool Write(const EncodedStep& step) = 0;
  // Names the worker for an error message ("(host pid N)"; the channel names
  // its rank).
  virtual std::string Name() const = 0;
};

}  // namespace moe
