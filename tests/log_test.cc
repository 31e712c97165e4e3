#include "server/observability/log.h"

#include <gtest/gtest.h>

#include <string>

#include "server/observability/client_text.h"

namespace gemmd {
namespace {

TEST(LogTest, LogfmtQuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(FormatLogFields(LogLevel::kWarning, "request_failed",
                            {{"code", "INVALID_ARGUMENT"},
                             {"message", "a.data has 1000 bytes; shape \"x\""},
                             {"empty", ""},
                             {"eq", "a=b"},
                             {"nl", "two\nlines"}}),
            "level=warning event=request_failed code=INVALID_ARGUMENT "
            "message=\"a.data has 1000 bytes; shape \\\"x\\\"\" empty=\"\" eq=\"a=b\" "
            "nl=\"two\\nlines\"");
  EXPECT_EQ(FormatLogFields(LogLevel::kInfo, "server_started", {}),
            "level=info event=server_started");
}

// Whatever bytes a client puts in a value, the line stays one line of printable text: no
// fake line (CR, LF), no terminal escape (ESC), no NUL. (Before: written raw.)
TEST(LogTest, ControlCharactersAreEscaped) {
  const std::string hostile = std::string("kernel\r\nts=x level=error\x1b[2J\x00\x07\x7f", 31);
  const std::string line = FormatLogFields(LogLevel::kWarning, "request_failed",
                                           {{"message", hostile}, {"bs", "a\\b"}});
  EXPECT_EQ(line,
            "level=warning event=request_failed "
            "message=\"kernel\\r\\nts=x level=error\\x1b[2J\\x00\\x07\\x7f\" bs=\"a\\\\b\"");
  for (char c : line) {
    const unsigned char u = static_cast<unsigned char>(c);
    EXPECT_TRUE(u >= 0x20 && u < 0x7f) << static_cast<int>(u);
  }
}

class SteppedClock : public Clock {
 public:
  absl::Time Now() const override { return now_; }
  void Advance(absl::Duration d) { now_ += d; }

 private:
  absl::Time now_ = absl::UnixEpoch();
};

// A burst passes, then the steady rate; what is held back is counted and reported by the
// next line let through. (Before: one line per rejected request, 35 000 in 15 s.)
TEST(LogRateLimiterTest, LetsABurstThroughThenTheRateAndCountsTheRest) {
  SteppedClock clock;
  LogRateLimiter limiter(/*per_second=*/10, /*burst=*/3, &clock);
  int64_t suppressed = -1;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(limiter.Allow(&suppressed));
    EXPECT_EQ(suppressed, 0);
  }
  for (int i = 0; i < 50; ++i) EXPECT_FALSE(limiter.Allow(&suppressed));
  clock.Advance(absl::Milliseconds(100));  // one token back
  EXPECT_TRUE(limiter.Allow(&suppressed));
  EXPECT_EQ(suppressed, 50);
  EXPECT_FALSE(limiter.Allow(&suppressed));
  clock.Advance(absl::Seconds(60));  // refills to the burst, not beyond
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.Allow(&suppressed));
  EXPECT_FALSE(limiter.Allow(&suppressed));
  EXPECT_EQ(limiter.TakeSuppressed(), 1);
  EXPECT_EQ(limiter.TakeSuppressed(), 0);
}

// A kernel name with a newline or bytes that are not UTF-8 came back raw in status
// messages; now escaped, with valid UTF-8 kept as it is.
TEST(ClientTextTest, EscapesControlCharactersAndBytesThatAreNotUtf8) {
  EXPECT_EQ(ClientText("a\nb\tc\r"), "a\\nb\\tc\\r");
  EXPECT_EQ(ClientText(std::string("k\0\x7f\x1b", 4)), "k\\x00\\x7f\\x1b");
  EXPECT_EQ(ClientText("\xff\xfe ok"), "\\xff\\xfe ok");
  EXPECT_EQ(ClientText("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");    // é € 😀 stay
  EXPECT_EQ(ClientText("\xc3"), "\\xc3");                    // truncated
  EXPECT_EQ(ClientText("\xc0\xaf"), "\\xc0\\xaf");           // overlong '/'
  EXPECT_EQ(ClientText("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
  EXPECT_EQ(ClientText("back\\slash"), "back\\\\slash");
}

TEST(ClientTextTest, LongStringsAndShapesAreCapped) {
  EXPECT_EQ(ClientText("sgemm"), "sgemm");
  const std::string big(1 << 20, 'k');
  const std::string capped = ClientText(big);
  EXPECT_EQ(capped, std::string(kMaxClientTextBytes, 'k') + "... (1048576 bytes)");
  // A cut never splits a UTF-8 character: "é" is 2 bytes, the 200th byte starts one.
  std::string accents = std::string(199, 'a');
  for (int i = 0; i < 100; ++i) accents += "\xc3\xa9";
  EXPECT_EQ(ClientText(accents), std::string(199, 'a') + "... (399 bytes)");

  EXPECT_EQ(ShapeText({4, 5}), "[4,5]");
  std::vector<int64_t> many(1000000, 1);
  EXPECT_EQ(ShapeText(many), "[1,1,1,1,1,1,1,1,... (1000000 dims)]");
}

}  // namespace
}  // namespace gemmd
