// Command oidc-provider is the local stack's and the tests' OpenID Provider.
//
// It is zitadel/oidc's example OP (github.com/zitadel/oidc/v3/example/server/exampleop
// and .../storage: discovery, JWKS, authorization code + PKCE, the token endpoint, a
// sign-in form), imported, not copied. What is ours is in store.go: who may sign in (any
// valid Achilles user key, with one dev password), the two clients Achilles needs, and
// JWT access tokens whose `aud` names the Achilles API and whose `sub` is the user key.
//
// Dev and tests only: it keeps everything in memory, signs with a key made at start, and
// its password is public. It is never part of an image.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
)

// listFlag is a repeatable flag that also splits comma-separated values.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(value string) error {
	for _, item := range strings.Split(value, ",") {
		if item = strings.TrimSpace(item); item != "" {
			*l = append(*l, item)
		}
	}
	return nil
}

func envOr(name, fallback string) string {
	if value, ok := os.LookupEnv(name); ok && value != "" {
		return value
	}
	return fallback
}

type options struct {
	listen          string
	issuer          string
	settings        Settings
	webRedirectURIs listFlag
}

func parseOptions(args []string) (options, error) {
	var o options
	flags := flag.NewFlagSet("oidc-provider", flag.ContinueOnError)
	flags.StringVar(&o.listen, "listen", envOr("ACHILLES_OIDC_LISTEN", ""), "host:port to serve on (env ACHILLES_OIDC_LISTEN)")
	flags.StringVar(&o.issuer, "issuer", envOr("ACHILLES_OIDC_ISSUER", ""), "the issuer URL, exactly as tokens' iss and the discovery document name it (env ACHILLES_OIDC_ISSUER)")
	flags.StringVar(&o.settings.APIAudience, "api-audience", envOr("ACHILLES_OIDC_API_AUDIENCE", "achilles-api"), "added to every access token's aud (env ACHILLES_OIDC_API_AUDIENCE)")
	flags.StringVar(&o.settings.DevPassword, "dev-password", envOr("ACHILLES_OIDC_DEV_PASSWORD", "achilles-dev"), "the one password of every user key (env ACHILLES_OIDC_DEV_PASSWORD)")
	flags.StringVar(&o.settings.WebClientID, "web-client-id", envOr("ACHILLES_OIDC_WEB_CLIENT_ID", "achilles-web"), "client_id of the web inbox (confidential)")
	flags.StringVar(&o.settings.WebClientSecret, "web-client-secret", envOr("ACHILLES_OIDC_WEB_CLIENT_SECRET", "achilles-web-dev-secret"), "client_secret of the web inbox (env ACHILLES_OIDC_WEB_CLIENT_SECRET)")
	flags.Var(&o.webRedirectURIs, "web-redirect-uri", "a redirect URI of the web inbox, exact or a glob such as http://127.0.0.1:*/auth/callback (repeatable, or comma-separated; env ACHILLES_OIDC_WEB_REDIRECT_URIS)")
	flags.StringVar(&o.settings.CLIClientID, "cli-client-id", envOr("ACHILLES_OIDC_CLI_CLIENT_ID", "achilles-cli"), "client_id of the public PKCE client `achilles dev token` uses")
	flags.DurationVar(&o.settings.AccessTokenLifetime, "access-token-lifetime", time.Hour, "how long an access token is valid")
	if err := flags.Parse(args); err != nil {
		return o, err
	}
	if flags.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(flags.Args(), " "))
	}
	if len(o.webRedirectURIs) == 0 {
		_ = o.webRedirectURIs.Set(os.Getenv("ACHILLES_OIDC_WEB_REDIRECT_URIS"))
	}
	o.settings.WebRedirectURIs = o.webRedirectURIs
	if o.listen == "" {
		return o, errors.New("-listen host:port is required")
	}
	issuer, err := url.Parse(o.issuer)
	if err != nil || (issuer.Scheme != "http" && issuer.Scheme != "https") || issuer.Host == "" || strings.TrimSuffix(issuer.Path, "/") != "" {
		return o, fmt.Errorf("-issuer must be an http(s) URL without a path, got %q", o.issuer)
	}
	if o.settings.APIAudience == "" || o.settings.DevPassword == "" || o.settings.WebClientID == "" || o.settings.WebClientSecret == "" || o.settings.CLIClientID == "" {
		return o, errors.New("-api-audience, -dev-password, -web-client-id, -web-client-secret and -cli-client-id must not be empty")
	}
	if o.settings.WebClientID == o.settings.CLIClientID {
		return o, errors.New("-web-client-id and -cli-client-id must differ")
	}
	if o.settings.AccessTokenLifetime <= 0 {
		return o, errors.New("-access-token-lifetime must be positive")
	}
	return o, nil
}

func main() {
	o, err := parseOptions(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "oidc-provider: %v\n", err)
		os.Exit(2)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	stor := NewStore(storage.NewStorageWithClients(UserStore{password: o.settings.DevPassword}, map[string]*storage.Client{}), o.settings)
	router := exampleop.SetupServer(o.issuer, stor, logger, false)

	server := &http.Server{Addr: o.listen, Handler: router, ReadHeaderTimeout: 10 * time.Second}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = server.Shutdown(ctx)
	}()
	logger.Info("serving", "listen", o.listen, "issuer", o.issuer, "api_audience", o.settings.APIAudience,
		"web_client_id", o.settings.WebClientID, "web_redirect_uris", o.settings.WebRedirectURIs, "cli_client_id", o.settings.CLIClientID)
	if err := server.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		logger.Error("server stopped", "error", err)
		os.Exit(1)
	}
}
