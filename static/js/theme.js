// The colour theme: "system" (follow prefers-color-scheme), "light" or "dark", remembered in
// localStorage. Loaded without defer in <head> so a stored choice applies before first paint.
// The top bar's #theme-switch button cycles the choice; every change of the theme in effect
// (a click, or the system's scheme changing while on "system") dispatches
// `trainyard:themechange` on document, which the charts listen to.
(function () {
  "use strict";
  var KEY = "trainyard-theme";
  var CHOICES = ["system", "light", "dark"];
  var LABELS = { system: "System", light: "Light", dark: "Dark" };
  var root = document.documentElement;
  var media = window.matchMedia("(prefers-color-scheme: dark)");

  function stored() {
    try {
      var value = window.localStorage.getItem(KEY);
      return CHOICES.indexOf(value) === -1 ? "system" : value;
    } catch (err) {
      return "system";  // storage disabled: follow the system
    }
  }

  function effective(choice) {
    if (choice === "system") return media.matches ? "dark" : "light";
    return choice;
  }

  function apply(choice) {
    if (choice === "system") root.removeAttribute("data-theme");
    else root.setAttribute("data-theme", choice);
  }

  var choice = stored();
  apply(choice);

  function announce() {
    document.dispatchEvent(new CustomEvent("trainyard:themechange", {
      detail: { choice: choice, theme: effective(choice) },
    }));
  }

  function render(button) {
    var theme = effective(choice);
    var text = "Theme: " + LABELS[choice] + (choice === "system" ? " (" + theme + ")" : "");
    button.querySelector(".theme-switch-label").textContent = text;
    button.dataset.choice = choice;
    button.title = "Switch the colour theme (system, light, dark)";
  }

  document.addEventListener("DOMContentLoaded", function () {
    var button = document.getElementById("theme-switch");
    if (button) {
      render(button);
      button.addEventListener("click", function () {
        choice = CHOICES[(CHOICES.indexOf(choice) + 1) % CHOICES.length];
        try {
          window.localStorage.setItem(KEY, choice);
        } catch (err) {
          // Not remembered, but still applied for this page.
        }
        apply(choice);
        render(button);
        announce();
      });
    }
    media.addEventListener("change", function () {
      if (choice !== "system") return;
      if (button) render(button);
      announce();
    });
  });
})();
