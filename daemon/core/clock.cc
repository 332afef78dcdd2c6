#include "daemon/core/clock.h"

namespace shardd {

Clock* Clock::Real() {
  static RealClock* const clock = new RealClock();
  return clock;
}

}  // namespace shardd
