// Release buttons post with the page's session (same origin) and reload;
// without JavaScript the form posts and shows the endpoint's JSON answer.
document.addEventListener("submit", async (ev) => {
  const form = ev.target;
  if (!form.classList.contains("release")) return;
  ev.preventDefault();
  const out = form.querySelector(".result");
  const button = form.querySelector("button");
  button.disabled = true;
  try {
    const resp = await fetch(form.action, { method: "POST", credentials: "same-origin" });
    if (resp.ok) {
      location.reload();
      return;
    }
    let msg = resp.status + " " + resp.statusText;
    try { msg = (await resp.json()).error || msg; } catch (e) { /* not JSON */ }
    out.textContent = msg;
  } catch (e) {
    out.textContent = String(e);
  }
  button.disabled = false;
});
