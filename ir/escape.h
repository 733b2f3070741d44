// Text that fusec echoes from its input (file names, node names, TOML values, flag values) is
// escaped for where it lands, so no name can add a line, forge a message or inject markup:
//
//   one_line        an error or warning line, a text table cell: control characters as \n, \t, \xNN
//   utf8_escaped    JSON output: bytes that are not UTF-8 as \xNN (nlohmann refuses them otherwise)
//   markdown_text   a pull-request comment: one_line, then HTML's & < > as entities and the
//                   punctuation Markdown reads inside a line behind a backslash
//
// All three keep valid UTF-8 text other than what they escape, so names in any script stay readable.
#pragma once
#include <string>
#include <string_view>

namespace fusec {

/// `s` with C0 and C1 control characters and DEL written as \n, \r, \t or \xNN (C1 as the two
/// bytes of its UTF-8 form), and bytes that are not UTF-8 as \xNN: the result holds no line
/// break and no terminal escape, so "fusec: error: <one_line(what)>" is exactly one line.
std::string one_line(std::string_view s);

/// `s` with each byte that is not part of a valid UTF-8 sequence written as \xNN; everything
/// else (control characters included: JSON escapes those itself) unchanged.
std::string utf8_escaped(std::string_view s);

/// `s` as literal Markdown text inside a line or a table cell (GitHub, GitLab): one_line, with
/// & < > as HTML entities and \ ` * _ [ ] | ~ behind a backslash, so it renders as written and
/// never as raw HTML, emphasis, a code span, a link or a table cell boundary. (Line-start syntax,
/// # - + 1., cannot apply: fusec puts echoed text only after a cell's or a quote's marker.)
std::string markdown_text(std::string_view s);

}  // namespace fusec
