// The report page's HTML skeleton, style sheet and script, built into the
// binary from page/ (BUILD: page_assets_gen), so the tool writes a
// self-contained page from any directory.

#ifndef TILEC_PASSES_INSPECT_PAGE_ASSETS_H_
#define TILEC_PASSES_INSPECT_PAGE_ASSETS_H_

namespace tilec::inspect {

// page/page.html: the whole page with three marker lines, each replaced by
// ReportPage: <!--tilec:style-->, <!--tilec:data-->, <!--tilec:script-->.
extern const char kPageHtml[];
extern const char kPageStyle[];   // page/page.css
extern const char kPageScript[];  // page/page.js

}  // namespace tilec::inspect

#endif  // TILEC_PASSES_INSPECT_PAGE_ASSETS_H_
