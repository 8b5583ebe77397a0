/* docutils writes the references as role=list whose entries carry role=doc-biblioentry, which a list may not hold
   (axe-core: aria-required-children). Each entry becomes a list item; its text and link are unchanged. */
document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll(".citation-list[role=list] > [role=doc-biblioentry]").forEach((entry) => {
    entry.setAttribute("role", "listitem");
  });
});
