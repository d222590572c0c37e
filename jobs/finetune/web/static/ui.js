// Forms that act ask first (data-confirm); inline handlers are barred by the page's CSP.
document.querySelectorAll("form[data-confirm]").forEach((form) => {
  form.addEventListener("submit", (event) => {
    const question = form.dataset.confirm;
    if (question && !window.confirm(question)) event.preventDefault();
  });
});
