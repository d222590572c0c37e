// Forms that act ask first (data-confirm); inline handlers are barred by the page's CSP.
document.addEventListener("submit", (event) => {
  const question = event.target.dataset && event.target.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});

// The overview stays current while it is left open: its sections are fetched again every few
// seconds and swapped in place (no reload, scroll position kept).
const live = document.querySelector("main[data-refresh]");
if (live) {
  const every = Number(live.dataset.refresh) * 1000;
  const refresh = async () => {
    try {
      const reply = await fetch(window.location.pathname, { credentials: "same-origin", redirect: "error" });
      if (reply.ok) {
        const fresh = new DOMParser().parseFromString(await reply.text(), "text/html");
        for (const section of live.querySelectorAll("section[id]")) {
          const replacement = fresh.getElementById(section.id);
          if (replacement) section.replaceWith(replacement);
        }
        live.dataset.refreshed = String(Number(live.dataset.refreshed || 0) + 1);
      }
    } catch (error) {
      // signed out or the coordinator is down: keep what is shown, try again later
    }
    window.setTimeout(refresh, every);
  };
  window.setTimeout(refresh, every);
}
