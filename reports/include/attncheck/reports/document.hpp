#pragma once
// A report's content is built once as a Document and rendered twice: as Markdown (report.md) and as a
// self-contained HTML page (index.html: inline CSS and inline SVG, nothing fetched from anywhere).

#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace attncheck::reports {

struct Heading {
  int level = 2;  // 1..4
  std::string text;
  std::string anchor;  // id to link to; empty for none
};

struct Paragraph {
  std::string text;
};

// Something the reader must not miss (no plots, an unreliable standard error, ...).
struct Notice {
  std::string text;
};

// "name: value" lines, e.g. a configuration or the provenance.
struct Facts {
  std::vector<std::pair<std::string, std::string>> items;
};

struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row_anchors;  // per row, a link target for the row's first cell (empty: none)
  // When set, the HTML page shows the table folded under this line, opened by a click (long per-point tables);
  // Markdown shows it as it is.
  std::string folded_as;
};

struct Figure {
  std::string file;        // the SVG beside report.md, relative to the report folder
  std::string inline_svg;  // the same SVG fit for embedding in HTML (see inline_svg)
  std::string caption;
  std::string png_file;  // the same figure as PNG (for slides and issues); empty when there is none
};

using Block = std::variant<Heading, Paragraph, Notice, Facts, Table, Figure>;

struct Document {
  std::string title;
  std::vector<Block> blocks;
};

std::string render_markdown(const Document& document);
std::string render_html(const Document& document);

// Text made safe for HTML element content and attribute values.
std::string escape_html(const std::string& text);

}  // namespace attncheck::reports
