#include "hold/clock.hpp"

namespace dlock::hold {

namespace {

class SystemClock final : public Clock {
public:
  util::TimePoint now() const override { return util::monotonic_now(); }
  void wait(util::EventLoop& loop, util::TimePoint t) override
  {
    loop.wake_at(t);
    loop.wait();
  }
};

} // namespace

Clock& system_clock()
{
  static SystemClock clock;
  return clock;
}

} // namespace dlock::hold
