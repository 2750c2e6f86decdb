// The New Job page: choosing one of the project's uploaded datasets in the fine-tune form's
// Dataset field sets Dataset format to the format that dataset was checked as on upload.
// Without JavaScript the server still refuses a mismatch, next to the format field.
(function () {
  const input = document.getElementById("finetune-dataset");
  const format = document.getElementById("finetune-dataset_format");
  const choices = document.getElementById("finetune-dataset-choices");
  if (!input || !format || !choices) return;
  function fill() {
    const chosen = Array.from(choices.options).find((option) => option.value === input.value.trim());
    if (chosen && chosen.dataset.format) format.value = chosen.dataset.format;
  }
  input.addEventListener("input", fill);
  input.addEventListener("change", fill);
})();

// The live quote also says what submitting would hold (two hours at the price ceiling), so a
// quote request carries the form's priority class and limits as well as the accelerator and
// GPU count its selects name; changing any of them asks again.
(function () {
  const QUOTED = ["priority_class", "max_price_usd_hr", "max_cost_usd"];
  document.body.addEventListener("htmx:configRequest", (event) => {
    const elt = event.detail.elt;
    const form = elt && elt.form;
    if (!form || !/\/quote\/$/.test(String(event.detail.path).split("?")[0])) return;
    QUOTED.forEach((name) => {
      const field = form.elements[name];
      if (field && !event.detail.formData.has(name)) event.detail.formData.set(name, field.value);
    });
  });
})();
