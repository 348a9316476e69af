package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"golang.org/x/text/language"

	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// The Achilles user key rule (operator/achilles/domain/users.py: USER_KEY_PATTERN and
// USER_KEY_MAX_LENGTH, the CRD's pattern and the database's CHECK).
var userKeyPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]*$`)

const userKeyMaxLength = 253

func validUserKey(key string) bool {
	return len(key) <= userKeyMaxLength && userKeyPattern.MatchString(key)
}

// cliRedirectURI is the CLI client's one redirect URI. A native client's loopback
// redirect matches on any port (RFC 8252 7.3); `achilles dev token` reads the code from
// the redirect's Location header and never listens there.
const cliRedirectURI = "http://127.0.0.1/callback"

// Settings are what the command line chooses (see main.go's flags).
type Settings struct {
	APIAudience         string
	DevPassword         string
	WebClientID         string
	WebClientSecret     string
	WebRedirectURIs     []string
	CLIClientID         string
	AccessTokenLifetime time.Duration
}

// UserStore knows every valid user key, each with the one dev password: the user
// behind a key is whoever the tests or the developer say it is. Its ID (a token's `sub`)
// and username are the key itself.
type UserStore struct {
	password string
}

func (u UserStore) user(key string) *storage.User {
	if !validUserKey(key) {
		return nil
	}
	email := ""
	if strings.Contains(key, "@") {
		email = key
	}
	return &storage.User{
		ID:                key,
		Username:          key,
		Password:          u.password,
		FirstName:         key,
		Email:             email,
		PreferredLanguage: language.English,
	}
}

func (u UserStore) GetUserByID(id string) *storage.User             { return u.user(id) }
func (u UserStore) GetUserByUsername(username string) *storage.User { return u.user(username) }

// ExampleClientID names the example's JWT-profile service user; Store refuses that grant.
func (u UserStore) ExampleClientID() string { return "" }

// client is one of our two OAuth clients; every access token it gets is a JWT.
type client struct {
	id              string
	secret          string // empty for the public (PKCE-only) CLI client
	applicationType op.ApplicationType
	authMethod      oidc.AuthMethod
	redirectURIs    []string
	redirectGlobs   []string
	logoutGlobs     []string
}

func isGlob(uri string) bool { return strings.ContainsAny(uri, "*?[{") }

// originGlob turns "http://host:port/path" (itself possibly a glob) into
// "http://host:port/**": where a signed-out browser may be sent back to.
func originGlob(uri string) string {
	scheme, rest, found := strings.Cut(uri, "://")
	if !found {
		return uri
	}
	host, _, _ := strings.Cut(rest, "/")
	return scheme + "://" + host + "/**"
}

func newWebClient(s Settings) *client {
	c := &client{
		id:              s.WebClientID,
		secret:          s.WebClientSecret,
		applicationType: op.ApplicationTypeWeb,
		authMethod:      oidc.AuthMethodBasic,
	}
	for _, uri := range s.WebRedirectURIs {
		if isGlob(uri) {
			c.redirectGlobs = append(c.redirectGlobs, uri)
		} else {
			c.redirectURIs = append(c.redirectURIs, uri)
		}
		c.logoutGlobs = append(c.logoutGlobs, originGlob(uri))
	}
	return c
}

func newCLIClient(s Settings) *client {
	return &client{
		id:              s.CLIClientID,
		applicationType: op.ApplicationTypeNative,
		authMethod:      oidc.AuthMethodNone,
		redirectURIs:    []string{cliRedirectURI},
	}
}

func (c *client) GetID() string                        { return c.id }
func (c *client) RedirectURIs() []string               { return c.redirectURIs }
func (c *client) PostLogoutRedirectURIs() []string     { return nil }
func (c *client) RedirectURIGlobs() []string           { return c.redirectGlobs }
func (c *client) PostLogoutRedirectURIGlobs() []string { return c.logoutGlobs }
func (c *client) ApplicationType() op.ApplicationType  { return c.applicationType }
func (c *client) AuthMethod() oidc.AuthMethod          { return c.authMethod }
func (c *client) ResponseTypes() []oidc.ResponseType {
	return []oidc.ResponseType{oidc.ResponseTypeCode}
}
func (c *client) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeCode}
}

// LoginURL is exampleop's sign-in form (mounted at /login/).
func (c *client) LoginURL(id string) string           { return "/login/username?authRequestID=" + id }
func (c *client) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }
func (c *client) IDTokenLifetime() time.Duration      { return time.Hour }
func (c *client) DevMode() bool                       { return false }
func (c *client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(scopes []string) []string { return scopes }
}
func (c *client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(scopes []string) []string { return scopes }
}
func (c *client) IsScopeAllowed(string) bool           { return false }
func (c *client) IDTokenUserinfoClaimsAssertion() bool { return true }
func (c *client) ClockSkew() time.Duration             { return 0 }

// Store is the example's in-memory storage with our users, our clients and our access
// tokens; the example's demo service user and client-credentials user are refused.
type Store struct {
	*storage.Storage
	settings Settings
	clients  map[string]*client
}

func NewStore(base *storage.Storage, settings Settings) *Store {
	web, cli := newWebClient(settings), newCLIClient(settings)
	return &Store{
		Storage:  base,
		settings: settings,
		clients:  map[string]*client{web.id: web, cli.id: cli},
	}
}

// CheckUsernamePassword is the sign-in form's check: a bad key gets its own message.
func (s *Store) CheckUsernamePassword(username, password, id string) error {
	if !validUserKey(username) {
		return errors.New("not an Achilles user key: a user key starts with a letter or digit and has only letters, digits and . _ @ + - (at most 253 characters)")
	}
	return s.Storage.CheckUsernamePassword(username, password, id)
}

func (s *Store) GetClientByClientID(_ context.Context, clientID string) (op.Client, error) {
	c, ok := s.clients[clientID]
	if !ok {
		return nil, fmt.Errorf("client not found")
	}
	return c, nil
}

func (s *Store) AuthorizeClientIDSecret(_ context.Context, clientID, clientSecret string) error {
	c, ok := s.clients[clientID]
	if !ok || c.secret == "" {
		return fmt.Errorf("client not found")
	}
	if subtle.ConstantTimeCompare([]byte(c.secret), []byte(clientSecret)) != 1 {
		return fmt.Errorf("invalid secret")
	}
	return nil
}

// apiAudienceRequest is a signed-in code request whose tokens are also for the API:
// the example's AuthRequest names only the client in `aud`.
type apiAudienceRequest struct {
	*storage.AuthRequest
	audience []string
}

func (r *apiAudienceRequest) GetAudience() []string { return r.audience }

func (s *Store) AuthRequestByCode(ctx context.Context, code string) (op.AuthRequest, error) {
	request, err := s.Storage.AuthRequestByCode(ctx, code)
	if err != nil {
		return nil, err
	}
	inner, ok := request.(*storage.AuthRequest)
	if !ok {
		return nil, fmt.Errorf("unexpected auth request type %T", request)
	}
	audience := []string{inner.ApplicationID}
	if s.settings.APIAudience != inner.ApplicationID {
		audience = append(audience, s.settings.APIAudience)
	}
	return &apiAudienceRequest{AuthRequest: inner, audience: audience}, nil
}

// CreateAccessToken records the token as the example does (it knows its own request
// type) and gives the JWT our lifetime; the example's 5-minute record only bounds the
// userinfo endpoint, which the API never calls.
func (s *Store) CreateAccessToken(ctx context.Context, request op.TokenRequest) (string, time.Time, error) {
	if wrapped, ok := request.(*apiAudienceRequest); ok {
		request = wrapped.AuthRequest
	}
	id, _, err := s.Storage.CreateAccessToken(ctx, request)
	if err != nil {
		return "", time.Time{}, err
	}
	return id, time.Now().Add(s.settings.AccessTokenLifetime), nil
}

var errRefused = errors.New("not offered by the Achilles dev provider")

// GetKeyByIDAndClientID would accept JWT-profile grants signed with the example's
// published service key: refused.
func (s *Store) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errRefused
}

// ClientCredentials would accept the example's built-in service user: refused.
func (s *Store) ClientCredentials(context.Context, string, string) (op.Client, error) {
	return nil, errRefused
}

func (s *Store) ClientCredentialsTokenRequest(context.Context, string, []string) (op.TokenRequest, error) {
	return nil, errRefused
}

// The example joins first and last name with a space; our users have one name, the key.
func (s *Store) SetUserinfoFromRequest(ctx context.Context, userinfo *oidc.UserInfo, token op.IDTokenRequest, scopes []string) error {
	err := s.Storage.SetUserinfoFromRequest(ctx, userinfo, token, scopes)
	userinfo.Name = strings.TrimSpace(userinfo.Name)
	return err
}

func (s *Store) SetUserinfoFromToken(ctx context.Context, userinfo *oidc.UserInfo, tokenID, subject, origin string) error {
	err := s.Storage.SetUserinfoFromToken(ctx, userinfo, tokenID, subject, origin)
	userinfo.Name = strings.TrimSpace(userinfo.Name)
	return err
}
