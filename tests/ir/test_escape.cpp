// ir/escape.h: what each escaper turns into text, and what it must leave alone (valid UTF-8 in any
// script, so escaped names stay readable).
#include <gtest/gtest.h>

#include "ir/escape.h"

namespace fusec {
namespace {

TEST(OneLine, ControlCharactersBecomeVisibleEscapes) {
  EXPECT_EQ(one_line("a\nfusec: error: forged"), "a\\nfusec: error: forged");
  EXPECT_EQ(one_line("tab\there\rcr"), "tab\\there\\rcr");
  EXPECT_EQ(one_line(std::string("nul\0x", 5)), "nul\\x00x");
  EXPECT_EQ(one_line("\x1b[31mred"), "\\x1b[31mred");  // a terminal escape
  EXPECT_EQ(one_line("del\x7f"), "del\\x7f");
  EXPECT_EQ(one_line("c1 \xc2\x85 next line"), "c1 \\xc2\\x85 next line");  // U+0085, NEL
}

TEST(OneLine, KeepsValidUtf8AndEscapesTheRest) {
  EXPECT_EQ(one_line("plain name_1.onnx"), "plain name_1.onnx");
  EXPECT_EQ(one_line("\xc3\xa9t\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82 \xc2\xb1"),
            "\xc3\xa9t\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82 \xc2\xb1");
  EXPECT_EQ(one_line("m\xff.onnx"), "m\\xff.onnx");
  EXPECT_EQ(one_line("\xc3"), "\\xc3");                             // truncated sequence
  EXPECT_EQ(one_line("\xc0\xaf"), "\\xc0\\xaf");                    // overlong '/'
  EXPECT_EQ(one_line("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a UTF-16 surrogate
  EXPECT_EQ(one_line("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
}

TEST(Utf8Escaped, OnlyBytesThatAreNotUtf8) {
  EXPECT_EQ(utf8_escaped("relu_\xff\xfe"), "relu_\\xff\\xfe");
  EXPECT_EQ(utf8_escaped("line\nbreak \xc3\xa9"), "line\nbreak \xc3\xa9");  // JSON escapes controls itself
}

TEST(MarkdownText, HtmlAndMarkupAreText) {
  EXPECT_EQ(markdown_text("<img src=x onerror=alert(1)><script>alert(2)</script>"),
            "&lt;img src=x onerror=alert(1)&gt;&lt;script&gt;alert(2)&lt;/script&gt;");
  EXPECT_EQ(markdown_text("a|b"), "a\\|b");
  EXPECT_EQ(markdown_text("**bold** _em_ `code` [link](u) ~~s~~ a\\b & c"),
            "\\*\\*bold\\*\\* \\_em\\_ \\`code\\` \\[link\\](u) \\~\\~s\\~\\~ a\\\\b &amp; c");
}

TEST(MarkdownText, NewlinesCannotStartALine) {
  std::string s = markdown_text("n\n\n**fusec check: no regression** (forged)\n\n");
  EXPECT_EQ(s.find('\n'), std::string::npos);
  EXPECT_EQ(s, "n\\\\n\\\\n\\*\\*fusec check: no regression\\*\\* (forged)\\\\n\\\\n");
}

}  // namespace
}  // namespace fusec
