#include "attncheck/reports/document.hpp"

#include "attncheck/records/verdict.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <string_view>

namespace attncheck::reports {

namespace {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

// Text that renders as itself: report text carries strings read from files (checkpoint names, paths,
// commands), so nothing in it may become HTML, a link, an image, code, emphasis, a new block or a table cell
// boundary. Control characters (newlines above all) become spaces, and the characters that would start markup
// are backslash-escaped, which CommonMark renders as the character itself. Underscores between letters or
// digits open no emphasis and stay as they are, so that names like sigma_x remain readable.
// In a table cell (`cell`) a pipe would end the cell, while line-start markers mean nothing.
std::string markdown_text(const std::string& raw, bool cell = false) {
  std::string text = raw;
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  text.erase(0, text.find_first_not_of(' '));  // four leading spaces would make a code block
  const auto alnum = [&](std::size_t i) {
    return i < text.size() && std::isalnum(static_cast<unsigned char>(text[i]));
  };
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const char next = i + 1 < text.size() ? text[i + 1] : '\0';
    const bool escape = std::string_view("\\`*<>&").find(c) != std::string_view::npos || (c == '|' && cell) ||
                        (c == '_' && !(i > 0 && alnum(i - 1) && alnum(i + 1))) || (c == '!' && next == '[') ||
                        (c == ']' && (next == '(' || next == '[')) ||
                        (i == 0 && !cell && std::string_view("[#+-=~").find(c) != std::string_view::npos);
    if (escape) out += '\\';
    out += c;
  }
  // "1. " or "1) " at the start would open an ordered list.
  const auto digits_end = out.find_first_not_of("0123456789");
  if (!cell && digits_end != std::string::npos && digits_end > 0 &&
      (out[digits_end] == '.' || out[digits_end] == ')') &&
      (digits_end + 1 == out.size() || out[digits_end + 1] == ' ')) {
    out.insert(digits_end, 1, '\\');
  }
  return out;
}

// A code span shows its content verbatim (no escapes, no HTML), so only its fence needs care: one backtick
// more than the longest run inside, and spaces inside the fence when the content touches it.
std::string markdown_code(const std::string& text) {
  std::string content = text;
  for (char& c : content) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  std::size_t longest = 0, run = 0;
  for (char c : content) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  const std::string fence(longest + 1, '`');
  const bool pad = !content.empty() && (content.front() == '`' || content.back() == '`');
  return fence + (pad ? " " : "") + content + (pad ? " " : "") + fence;
}

// A link target as Markdown writes it: every byte but the few that are safe in any URL percent-encoded, so that
// no parenthesis, space, angle bracket or newline ends the link or starts markup.
std::string markdown_destination(const std::string& target) {
  std::string out;
  for (const char c : target) {
    const auto byte = static_cast<unsigned char>(c);
    if (std::isalnum(byte) || std::string_view("-._~/#").find(c) != std::string_view::npos) {
      out += c;
    } else {
      out += fmt::format("%{:02X}", byte);
    }
  }
  return out;
}

std::string verdict_class(const std::string& cell) {
  for (const records::Verdict verdict : records::kAllVerdicts) {
    const std::string_view word = records::to_string(verdict);
    if (cell == word) return fmt::format(" class=\"verdict {}\"", word);
  }
  return "";
}

constexpr const char* kStyle = R"(
body { font-family: system-ui, sans-serif; max-width: 78rem; margin: 1.5rem auto; padding: 0 1rem; color: #1b1b1b; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.3rem; border-bottom: 1px solid #ccc; margin-top: 2.2rem; }
h3 { font-size: 1.1rem; margin-top: 1.6rem; }
table { border-collapse: collapse; margin: 0.6rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 0.15rem 1rem; font-size: 0.9rem; }
dl.facts dt { font-weight: 600; } dl.facts dd { margin: 0; font-family: ui-monospace, monospace; }
.notice { border-left: 4px solid #d55e00; background: #fff4ec; padding: 0.5rem 0.8rem; margin: 0.8rem 0; }
.verdict { font-weight: 700; }
.holds { color: #00703c; } .tight { color: #0b5394; } .violated { color: #b00020; } .inconclusive { color: #7a5c00; }
.consistent { color: #5b3a8c; }
nav.contents { border: 1px solid #ccc; padding: 0.5rem 1rem; margin: 1rem 0; font-size: 0.9rem; }
nav.contents ul { margin: 0.2rem 0; padding-left: 1.2rem; }
details > summary { cursor: pointer; color: #0b5394; margin: 0.4rem 0; }
figure { margin: 0.8rem 0; } figure svg { max-width: 100%; height: auto; }
figcaption { font-size: 0.85rem; color: #444; }
)";

}  // namespace

std::string escape_html(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

// The anchored headings of levels 2 and 3, for the table of contents; none for a document too short to need one.
std::vector<const Heading*> contents_of(const Document& document) {
  std::vector<const Heading*> headings;
  for (const Block& block : document.blocks) {
    if (const auto* h = std::get_if<Heading>(&block); h && !h->anchor.empty() && (h->level == 2 || h->level == 3))
      headings.push_back(h);
  }
  if (headings.size() < 3) headings.clear();
  return headings;
}

}  // namespace

std::string render_markdown(const Document& document) {
  // The title names the input (a results folder or a probe log): text from the file system like any other.
  std::string out = fmt::format("# {}\n", markdown_text(document.title));
  if (const auto contents = contents_of(document); !contents.empty()) {
    out += "\nContents:\n\n";
    for (const Heading* h : contents) {
      out += fmt::format("{}- [{}](#{})\n", h->level == 3 ? "  " : "", markdown_text(h->text),
                         markdown_destination(h->anchor));
    }
  }
  for (const Block& block : document.blocks) {
    out += "\n";
    std::visit(Overloaded{
                   [&](const Heading& h) {
                     if (!h.anchor.empty()) out += fmt::format("<a id=\"{}\"></a>\n", escape_html(h.anchor));
                     out += fmt::format("{} {}\n", std::string(static_cast<std::size_t>(h.level), '#'),
                                        markdown_text(h.text));
                   },
                   [&](const Paragraph& p) { out += markdown_text(p.text) + "\n"; },
                   [&](const Notice& n) { out += fmt::format("> **Notice:** {}\n", markdown_text(n.text)); },
                   [&](const Facts& f) {
                     for (const auto& [name, value] : f.items) {
                       out += fmt::format("- {}: {}\n", markdown_text(name), markdown_code(value));
                     }
                   },
                   [&](const Table& t) {
                     out += "|";
                     for (const std::string& h : t.header) out += " " + markdown_text(h, true) + " |";
                     out += "\n|";
                     for (std::size_t i = 0; i < t.header.size(); ++i) out += " --- |";
                     out += "\n";
                     for (std::size_t r = 0; r < t.rows.size(); ++r) {
                       out += "|";
                       for (std::size_t c = 0; c < t.rows[r].size(); ++c) {
                         const std::string cell = markdown_text(t.rows[r][c], true);
                         const bool linked = c == 0 && r < t.row_anchors.size() && !t.row_anchors[r].empty();
                         out +=
                             " " +
                             (linked ? fmt::format("[{}](#{})", cell, markdown_destination(t.row_anchors[r])) : cell) +
                             " |";
                       }
                       out += "\n";
                     }
                   },
                   [&](const Figure& f) {
                     const std::string caption = markdown_text(f.caption);
                     out += fmt::format("![{}]({})\n\n*{}*", caption, markdown_destination(f.file), caption);
                     out += f.png_file.empty() ? "\n" : fmt::format(" ([PNG]({}))\n", markdown_destination(f.png_file));
                   },
               },
               block);
  }
  return out;
}

std::string render_html(const Document& document) {
  std::string out = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{}</title>\n"
      "<style>{}</style>\n</head>\n<body>\n<h1>{}</h1>\n",
      escape_html(document.title), kStyle, escape_html(document.title));
  if (const auto contents = contents_of(document); !contents.empty()) {
    out += "<nav class=\"contents\"><strong>Contents</strong>\n<ul>\n";
    // Level 3 entries nest in a list under the level 2 entry before them (or stand at the top without one).
    bool item_open = false, nested = false;
    for (const Heading* h : contents) {
      if (h->level == 3 && item_open && !nested) {
        out += "\n<ul>\n";
        nested = true;
      } else if (h->level == 2 || !item_open) {
        if (nested) out += "</ul>\n";
        if (item_open) out += "</li>\n";
        nested = false;
      }
      const std::string link = fmt::format("<a href=\"#{}\">{}</a>", escape_html(h->anchor), escape_html(h->text));
      if (nested) {
        out += "<li>" + link + "</li>\n";
      } else {
        out += "<li>" + link;
        item_open = true;
      }
    }
    if (nested) out += "</ul>\n";
    if (item_open) out += "</li>\n";
    out += "</ul>\n</nav>\n";
  }
  for (const Block& block : document.blocks) {
    std::visit(Overloaded{
                   [&](const Heading& h) {
                     const std::string id = h.anchor.empty() ? "" : fmt::format(" id=\"{}\"", escape_html(h.anchor));
                     out += fmt::format("<h{0}{1}>{2}</h{0}>\n", h.level, id, escape_html(h.text));
                   },
                   [&](const Paragraph& p) { out += fmt::format("<p>{}</p>\n", escape_html(p.text)); },
                   [&](const Notice& n) {
                     out +=
                         fmt::format("<div class=\"notice\"><strong>Notice:</strong> {}</div>\n", escape_html(n.text));
                   },
                   [&](const Facts& f) {
                     out += "<dl class=\"facts\">\n";
                     for (const auto& [name, value] : f.items) {
                       out += fmt::format("<dt>{}</dt><dd>{}</dd>\n", escape_html(name), escape_html(value));
                     }
                     out += "</dl>\n";
                   },
                   [&](const Table& t) {
                     if (!t.folded_as.empty())
                       out += fmt::format("<details>\n<summary>{}</summary>\n", escape_html(t.folded_as));
                     out += "<table>\n<thead><tr>";
                     for (const std::string& h : t.header) out += fmt::format("<th>{}</th>", escape_html(h));
                     out += "</tr></thead>\n<tbody>\n";
                     for (std::size_t r = 0; r < t.rows.size(); ++r) {
                       out += "<tr>";
                       for (std::size_t c = 0; c < t.rows[r].size(); ++c) {
                         const std::string& cell = t.rows[r][c];
                         std::string content = escape_html(cell);
                         if (c == 0 && r < t.row_anchors.size() && !t.row_anchors[r].empty()) {
                           content = fmt::format("<a href=\"#{}\">{}</a>", escape_html(t.row_anchors[r]), content);
                         }
                         out += fmt::format("<td{}>{}</td>", verdict_class(cell), content);
                       }
                       out += "</tr>\n";
                     }
                     out += "</tbody>\n</table>\n";
                     if (!t.folded_as.empty()) out += "</details>\n";
                   },
                   [&](const Figure& f) {
                     const std::string png =
                         f.png_file.empty() ? "" : fmt::format(" <a href=\"{}\">PNG</a>", escape_html(f.png_file));
                     out += fmt::format("<figure>\n{}\n<figcaption>{}{}</figcaption>\n</figure>\n", f.inline_svg,
                                        escape_html(f.caption), png);
                   },
               },
               block);
  }
  out += "</body>\n</html>\n";
  return out;
}

}  // namespace attncheck::reports
