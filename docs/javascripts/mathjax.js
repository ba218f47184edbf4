// MathJax settings for pymdownx.arithmatex (generic mode): typeset \( \) and \[ \] spans only,
// and again after each page change of Material's instant navigation. MathJax itself is the
// copy in vendor/mathjax/ (tex-svg-full.js: every TeX extension and the SVG font built in), so
// formulas render with no network: this file must load before it (mkdocs.yml extra_javascript).
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
  },
  svg: {
    fontCache: "global",
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex",
  },
};

if (typeof document$ !== "undefined") {
  document$.subscribe(() => {
    if (window.MathJax.typesetPromise) {
      window.MathJax.startup.output.clearCache();
      window.MathJax.typesetClear();
      window.MathJax.texReset();
      window.MathJax.typesetPromise();
    }
  });
}
