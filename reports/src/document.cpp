#include "attncheck/reports/document.hpp"

#include <fmt/format.h>

namespace attncheck::reports {

namespace {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

// A table cell must stay on one line and must not end the cell early.
std::string markdown_cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return out;
}

std::string verdict_class(const std::string& cell) {
  for (const char* word : {"holds", "tight", "violated", "inconclusive"}) {
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

std::string render_markdown(const Document& document) {
  std::string out = fmt::format("# {}\n", document.title);
  for (const Block& block : document.blocks) {
    out += "\n";
    std::visit(Overloaded{
                   [&](const Heading& h) {
                     if (!h.anchor.empty()) out += fmt::format("<a id=\"{}\"></a>\n", h.anchor);
                     out += fmt::format("{} {}\n", std::string(static_cast<std::size_t>(h.level), '#'), h.text);
                   },
                   [&](const Paragraph& p) { out += p.text + "\n"; },
                   [&](const Notice& n) { out += fmt::format("> **Notice:** {}\n", n.text); },
                   [&](const Facts& f) {
                     for (const auto& [name, value] : f.items) out += fmt::format("- {}: `{}`\n", name, value);
                   },
                   [&](const Table& t) {
                     out += "|";
                     for (const std::string& h : t.header) out += " " + markdown_cell(h) + " |";
                     out += "\n|";
                     for (std::size_t i = 0; i < t.header.size(); ++i) out += " --- |";
                     out += "\n";
                     for (std::size_t r = 0; r < t.rows.size(); ++r) {
                       out += "|";
                       for (std::size_t c = 0; c < t.rows[r].size(); ++c) {
                         const std::string cell = markdown_cell(t.rows[r][c]);
                         const bool linked = c == 0 && r < t.row_anchors.size() && !t.row_anchors[r].empty();
                         out += " " + (linked ? fmt::format("[{}](#{})", cell, t.row_anchors[r]) : cell) + " |";
                       }
                       out += "\n";
                     }
                   },
                   [&](const Figure& f) { out += fmt::format("![{}]({})\n\n*{}*\n", f.caption, f.file, f.caption); },
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
  for (const Block& block : document.blocks) {
    std::visit(Overloaded{
                   [&](const Heading& h) {
                     const std::string id = h.anchor.empty() ? "" : fmt::format(" id=\"{}\"", escape_html(h.anchor));
                     out += fmt::format("<h{0}{1}>{2}</h{0}>\n", h.level, id, escape_html(h.text));
                   },
                   [&](const Paragraph& p) { out += fmt::format("<p>{}</p>\n", escape_html(p.text)); },
                   [&](const Notice& n) {
                     out += fmt::format("<div class=\"notice\"><strong>Notice:</strong> {}</div>\n", escape_html(n.text));
                   },
                   [&](const Facts& f) {
                     out += "<dl class=\"facts\">\n";
                     for (const auto& [name, value] : f.items) {
                       out += fmt::format("<dt>{}</dt><dd>{}</dd>\n", escape_html(name), escape_html(value));
                     }
                     out += "</dl>\n";
                   },
                   [&](const Table& t) {
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
                   },
                   [&](const Figure& f) {
                     out += fmt::format("<figure>\n{}\n<figcaption>{}</figcaption>\n</figure>\n", f.inline_svg,
                                        escape_html(f.caption));
                   },
               },
               block);
  }
  out += "</body>\n</html>\n";
  return out;
}

}  // namespace attncheck::reports
