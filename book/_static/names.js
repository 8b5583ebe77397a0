/* Accessible names that say what the reader sees (WCAG 2.5.3, "label in name"), and a bibliography whose list
   holds list items. The theme and docutils write this markup; these few attributes are the whole change. */
document.addEventListener("DOMContentLoaded", () => {
  // The search button shows "Search Ctrl+K": its name says the same, and the shortcut is announced as one.
  document.querySelectorAll(".search-button__button").forEach((button) => {
    const shown = button.textContent.replace(/\s+/g, " ").replace(/ ?\+ ?/g, "+").trim();
    button.setAttribute("aria-label", shown);
    button.setAttribute("aria-keyshortcuts", "Control+K");
  });
  // The colour-mode button shows one icon of three; their tooltips are not text on the button, so the icons
  // are hidden from assistive technology and the button keeps its one name, "Color mode".
  document.querySelectorAll(".theme-switch-button .theme-switch").forEach((icon) => {
    icon.removeAttribute("title");
    icon.setAttribute("aria-hidden", "true");
  });
  // docutils writes the references as role=list whose entries carry role=doc-biblioentry.
  document.querySelectorAll(".citation-list[role=list] > [role=doc-biblioentry]").forEach((entry) => {
    entry.setAttribute("role", "listitem");
  });
});
