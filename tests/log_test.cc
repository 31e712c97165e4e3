#include "server/log.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace gemmd
