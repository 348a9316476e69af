// The browsable view of /openapi.json (docs/api.md). A file, not an inline script: the
// page's Content-Security-Policy allows scripts from this origin only.
window.ui = SwaggerUIBundle({ url: "/openapi.json", dom_id: "#swagger-ui" });
