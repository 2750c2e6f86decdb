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
