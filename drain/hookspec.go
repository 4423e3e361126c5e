package drain

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/drainkit/drainkit/internal/listenaddr"
	"github.com/drainkit/drainkit/internal/podhooks"
)

// A hookSite is where a Server serves the preStop hook and srv, which the
// manifest's preStop must reach.
type hookSite struct {
	hook, srv, secret string
	// local reports whether ip is an address of this process's network
	// namespace: the pod's (or, on the node's network, the node's).
	local func(net.IP) bool
}

// A hookVerdict is what a container's preStop hook does to the drain: the
// level of its line at start, the line, and what to change (empty when
// nothing).
type hookVerdict struct {
	level  slog.Level
	msg    string
	change []string
}

// sayPreStop says at start, once, what the preStop hook of this process's
// container, as the pod's spec has it, will do to the drain. The kubelet
// says nothing of a hook that does not reach it: it takes any answer to an
// httpGet, a 404 or 403 too, for the hook's end (no event, no line in its
// log), and an exec hook that never calls the drain is, for the kubelet, a
// hook that worked. The drain then starts only at SIGTERM, with no preStop
// wait, its gate closed only then; an exec hook that waits for something
// else (the seed's loop until no sandbox runs) holds SIGTERM back too, up
// to the whole grace. Nothing is said when the spec could not be read.
func sayPreStop(log *slog.Logger, spec *podSpec, site hookSite) {
	if spec == nil || spec.err != nil {
		return
	}
	pod := podhooks.Of(spec.spec)
	sayPostStart(log, pod, site)
	byName := make(map[string]podhooks.Container, len(pod.Containers))
	for _, c := range pod.Containers {
		byName[c.Name] = c
	}
	if name, known := ownContainer(byName); known {
		v := judgePreStop(pod, byName[name], site)
		say(log, v, "container", name)
		return
	}
	// Which container this is is not known: a hook of any that reaches
	// the drain is taken for this one's.
	var misses []hookVerdict
	var names []string
	for _, c := range pod.Containers {
		if c.PreStop == nil {
			continue
		}
		v := judgePreStop(pod, c, site)
		if v.level < slog.LevelWarn {
			say(log, v, "container", c.Name)
			return
		}
		misses, names = append(misses, v), append(names, c.Name)
	}
	if len(misses) == 0 {
		say(log, noPreStop(site), "containers", len(pod.Containers))
		return
	}
	for i, v := range misses {
		say(log, v, "container", names[i], "note", "which of the pod's containers this process is is not known; none's preStop reaches the drain")
	}
}

// sayPostStart says at Error each postStart hook of pod's containers
// that reaches the drain at site: the kubelet calls it as the container
// starts, and the first call closes the gate and turns readiness off, the
// node out of service from its start; refused, while the hook is not yet
// listened on, it fails the postStart, and the kubelet kills the
// container. Any container's counts: the pod's containers share its
// network.
func sayPostStart(log *slog.Logger, pod podhooks.Pod, site hookSite) {
	for _, c := range pod.Containers {
		h := c.PostStart
		if h == nil || h.Sleep != nil || h.HTTPGet == nil && h.Exec == nil {
			continue
		}
		c.PreStop = h
		v := judgePreStop(pod, c, site)
		// An httpGet's Warn is scheme HTTPS, which reaches the drain
		// through the kubelet's fallback; its misses are Errors.
		if reaches := v.level < slog.LevelWarn || h.HTTPGet != nil && v.level == slog.LevelWarn; !reaches {
			continue
		}
		log.Error("drain: the postStart hook calls GET "+hookPath+" on "+EnvHookListen+": the kubelet calls it as the container starts, "+
			"and it starts the drain then (the gate closed, readiness off: the node out of service from its start), "+
			"or, refused before the hook listens, fails the postStart and the kubelet kills the container; remove it: the drain's hook is for the container's stop",
			"container", c.Name)
	}
}

// say logs v with args.
func say(log *slog.Logger, v hookVerdict, args ...any) {
	msg := v.msg
	if len(v.change) > 0 {
		msg += "; " + strings.Join(v.change, "; ")
	}
	log.Log(context.Background(), v.level, msg, args...)
}

// judgePreStop is what c's preStop hook, in pod, does to the drain served
// at site.
func judgePreStop(pod podhooks.Pod, c podhooks.Container, site hookSite) hookVerdict {
	h := c.PreStop
	switch {
	case h == nil:
		return noPreStop(site)
	case h.HTTPGet != nil:
		return judgeHTTPGet(pod, c, *h.HTTPGet, site)
	case h.Exec != nil:
		return judgeExec(h.Exec, site)
	case h.Sleep != nil:
		return hookVerdict{level: slog.LevelInfo, msg: fmt.Sprintf("drain: the preStop hook sleeps %d s: the kubelet calls no server; "+
			"the drain starts at SIGTERM, the sleep after the grace began, which the budget plans with (%s or the spec)", *h.Sleep, EnvPreStopSleep)}
	}
	return hookVerdict{level: slog.LevelWarn, msg: "drain: the preStop hook is of a kind drainkit does not know: the drain starts at SIGTERM unless it calls GET " + hookPath}
}

// noPreStop is the verdict on a container with no preStop hook.
func noPreStop(site hookSite) hookVerdict {
	return hookVerdict{level: slog.LevelInfo,
		msg:    "drain: the container has no preStop hook: the drain starts at SIGTERM, with no preStop wait, its gate closing then",
		change: []string{"for the wait, give it lifecycle.preStop.httpGet {path: " + hookPath + ", port: " + portOf(site.hook) + "} or exec {command: [/drainhook]}"}}
}

// judgeExec is the verdict on an exec hook whose command is cmd: one that
// names neither drainhook nor GET /drain never calls the drain (a user's
// handler mounted elsewhere may, which the spec cannot show: Warn, not
// Error).
func judgeExec(cmd []string, site hookSite) hookVerdict {
	line := strings.Join(cmd, " ")
	var words []string
	for _, arg := range cmd {
		for _, word := range strings.Fields(arg) {
			words = append(words, strings.Trim(word, `"';&|()`))
		}
	}
	for i, word := range words {
		if path.Base(word) == "drainhook" {
			if u, given := drainhookURL(words[i+1:]); given {
				return judgeDrainhookURL(u, site)
			}
			return hookVerdict{level: slog.LevelInfo, msg: "drain: the preStop hook runs drainhook, which calls GET " + hookPath + " at " + EnvHookListen + ": the drain starts at its call"}
		}
	}
	if strings.Contains(line, hookPath) && strings.Contains(line, ":"+portOf(site.hook)) {
		return hookVerdict{level: slog.LevelInfo, msg: "drain: the preStop exec hook names GET " + hookPath + " at the hook's port: the drain starts at its call, if the command makes it"}
	}
	return hookVerdict{level: slog.LevelWarn,
		msg: fmt.Sprintf("drain: the preStop exec hook %q calls neither drainhook nor GET %s on %s: the drain never hears of it and starts only at SIGTERM, "+
			"with no preStop wait, its gate closing only then; the kubelet waits for the command first, up to the whole grace "+
			"(one that waits for the sandboxes to end leaves SIGTERM 2 s before SIGKILL), and the budget learns of that time only from the pod's deletionTimestamp",
			line, hookPath, EnvHookListen),
		change: []string{"give it exec {command: [/drainhook]} (drain/cmd/drainhook), or an httpGet {path: " + hookPath + ", port: " + portOf(site.hook) + "}"}}
}

// drainhookURL is the -url (or --url) among args, drainhook's, and
// whether one is given: without it drainhook calls EnvHookListen, from the
// container's environment, which it shares with the server.
func drainhookURL(args []string) (string, bool) {
	for i, arg := range args {
		name, value, inline := strings.Cut(strings.TrimPrefix(arg, "-"), "=")
		if name != "-url" && name != "url" {
			continue
		}
		if inline {
			return value, true
		}
		if i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// judgeDrainhookURL is the verdict on drainhook called with -url raw: it
// asks that URL, from the container, whose network is the pod's (a
// loopback hook is reached there), and a 404 or 403 (the server's own
// port, another path, no secret) or a refused connection (another port)
// ends it with exit 1, no drain wait.
func judgeDrainhookURL(raw string, site hookSite) hookVerdict {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return hookVerdict{level: slog.LevelError, msg: fmt.Sprintf("drain: the preStop hook runs drainhook with -url %q, which is no URL drainhook takes: it exits 2, no drain wait; "+
			"the drain starts only at SIGTERM", raw),
			change: []string{"leave -url out (drainhook then calls " + EnvHookListen + ")"}}
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	var misses []string
	if n, err := strconv.Atoi(port); err != nil {
		misses = append(misses, "its port "+port+" is no port number")
	} else if miss := portMiss(n, site); miss != "" {
		misses = append(misses, miss)
	}
	if miss := hostMiss(true, u.Hostname(), site); miss != "" {
		misses = append(misses, miss)
	}
	if p := requestPath(u.EscapedPath()); p != hookPath {
		misses = append(misses, fmt.Sprintf("its path %s is not %s: the hook listener answers 404", p, hookPath))
	}
	if u.Scheme == "https" {
		misses = append(misses, "its scheme is https, where the hook is plain HTTP: the TLS handshake fails")
	}
	if len(misses) > 0 {
		return hookVerdict{level: slog.LevelError,
			msg: "drain: the preStop hook runs drainhook -url " + raw + ", which never reaches the drain: " + strings.Join(misses, "; ") +
				": drainhook gives up (exit 1, FailedPreStopHook) and the drain starts only at SIGTERM, with no preStop wait, its gate closing only then",
			change: []string{"leave -url out: drainhook then calls " + EnvHookListen + "=" + site.hook}}
	}
	return hookVerdict{level: slog.LevelInfo, msg: "drain: the preStop hook runs drainhook, and drainhook calls " + raw + ", the hook: the drain starts at its call"}
}

// judgeHTTPGet is the verdict on c's httpGet hook g: whether the kubelet's
// GET reaches the hook at site, as the kubelet v1.34 makes it (its
// lifecycle handler: the host, or the pod's address; the port, or the
// container's port of that name; the path as written, "/" for none; the
// scheme, HTTPS falling back to HTTP).
func judgeHTTPGet(pod podhooks.Pod, c podhooks.Container, g podhooks.HTTPGet, site hookSite) hookVerdict {
	port, portErr := resolvePort(g.Port, c)
	target := kubeletURL(g, port)
	var misses []string
	if portErr != nil {
		misses = append(misses, portErr.Error()+": the kubelet fails the hook (FailedPreStopHook) and sends SIGTERM at once")
	} else if miss := portMiss(port, site); miss != "" {
		misses = append(misses, miss)
	}
	if miss := hostMiss(pod.HostNetwork, g.Host, site); miss != "" {
		misses = append(misses, miss)
	}
	if p := requestPath(g.Path); p != hookPath {
		misses = append(misses, fmt.Sprintf("its path %s is not %s: the hook listener answers 404, which the kubelet takes for the hook's end, with no event", p, hookPath))
	}
	if miss := secretMiss(g.Headers, site.secret); miss != "" {
		misses = append(misses, miss)
	}
	if len(misses) > 0 {
		return hookVerdict{level: slog.LevelError,
			msg: "drain: the preStop httpGet " + target + " never reaches the drain: " + strings.Join(misses, "; ") +
				": the drain starts only at SIGTERM, with no preStop wait, its gate closing only then",
			change: []string{"the hook is GET " + hookPath + " on " + EnvHookListen + "=" + site.hook + hostAdvice(pod.HostNetwork)}}
	}
	if strings.EqualFold(g.Scheme, "HTTPS") {
		return hookVerdict{level: slog.LevelWarn,
			msg:    "drain: the preStop httpGet " + target + " has scheme HTTPS, where the hook is plain HTTP: the kubelet's TLS attempt fails and it asks again over HTTP, which reaches the drain, with a LifecycleHTTPFallback event at every drain",
			change: []string{"give it scheme: HTTP"}}
	}
	return hookVerdict{level: slog.LevelInfo, msg: "drain: the preStop httpGet " + target + " reaches the hook: the drain starts at its call"}
}

// hostAdvice is how an httpGet reaches the hook on a network.
func hostAdvice(hostNetwork bool) string {
	if hostNetwork {
		return " (on the node's network an httpGet reaches a loopback hook with host: 127.0.0.1)"
	}
	return " (on a pod network an httpGet without host calls the pod's address: set " + EnvHookListen + " to [$(POD_IP)]:PORT with " + EnvHookSecret + "; or use exec drainhook)"
}

// resolvePort is the port the kubelet calls for p, as its
// probe.ResolveContainerPort: a number, else the container's port of that
// name, else a number written as text.
func resolvePort(p string, c podhooks.Container) (int, error) {
	if n, ok := c.Ports[p]; ok {
		return n, nil
	}
	n, err := strconv.Atoi(p)
	if err != nil || n <= 0 || n > 65535 {
		return 0, fmt.Errorf("its port %q is none of the container's named ports nor a port number", p)
	}
	return n, nil
}

// kubeletURL is the URL the kubelet asks, "POD-ADDRESS" for the pod's
// address it takes when host is empty.
func kubeletURL(g podhooks.HTTPGet, port int) string {
	scheme, host := strings.ToLower(g.Scheme), g.Host
	if scheme == "" {
		scheme = "http"
	}
	if host == "" {
		host = "POD-ADDRESS"
	}
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port)) + requestPath(g.Path)
}

// requestPath is the path the kubelet's GET asks for path as written:
// url.Parse's, "/" in front (an http URL with a host has one).
func requestPath(p string) string {
	if u, err := url.Parse(p); err == nil {
		p = u.Path
	}
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	return p
}

// portMiss says why port is not the hook's, "" when it is.
func portMiss(port int, site hookSite) string {
	p := strconv.Itoa(port)
	if listenaddr.SamePort(":"+p, ":"+portOf(site.hook)) {
		return ""
	}
	if listenaddr.SamePort(":"+p, ":"+portOf(site.srv)) {
		return "its port " + p + " is the server's own (srv.Addr, " + site.srv + "), whose handler serves no GET " + hookPath +
			": its answer, 404, is for the kubelet the hook's end, with no event"
	}
	return "its port " + p + " is not the hook's, " + portOf(site.hook) + ": nothing of the server's answers there (a refused connection: FailedPreStopHook, SIGTERM at once)"
}

// portOf is addr's port, as a manifest writes it.
func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// hostMiss says why the kubelet's connection to host (the pod's address
// when empty) does not reach the hook listening at site, "" when it does
// or the spec cannot tell (a host name).
func hostMiss(hostNetwork bool, host string, site hookSite) string {
	listenHost, _, _ := net.SplitHostPort(site.hook)
	listenIP := net.ParseIP(listenHost)
	if listenHost == "localhost" { // net.Listen takes a name's first IPv4 address: 127.0.0.1
		listenIP = net.IPv4(127, 0, 0, 1)
	}
	wildcard := listenHost == "" || listenIP != nil && listenIP.IsUnspecified()
	loopbackHook := listenaddr.Loopback(site.hook)
	switch {
	case host == "" && hostNetwork:
		return "it has no host, and on the node's network (hostNetwork) the kubelet v1.34 finds no pod address to call (\"failed to find networking container\", " +
			"kubernetes/kubernetes#134285): FailedPreStopHook, SIGTERM at once"
	case host == "" && loopbackHook:
		return "it has no host: the kubelet calls the pod's address, and the hook listens on loopback (" + site.hook + "): a refused connection, FailedPreStopHook, SIGTERM at once"
	case host == "":
		return "" // the pod's address: the hook's, or one of all of them
	}
	ip := net.ParseIP(host)
	if host == "localhost" {
		ip = net.IPv4(127, 0, 0, 1)
	}
	switch {
	case ip == nil:
		return "" // a name: not told
	case ip.IsLoopback() && !hostNetwork:
		return "its host " + host + " is the node's loopback, which the kubelet calls from the node's network, not the pod's: the hook is never reached there"
	case !ip.IsLoopback() && !site.local(ip):
		return "its host " + host + " is no address of this pod"
	case wildcard || listenIP != nil && listenIP.Equal(ip) || host == "localhost" && loopbackHook:
		return ""
	}
	return "its host " + host + " is not the address the hook listens on (" + site.hook + ")"
}

// secretMiss says why headers, the httpGet's, are refused by the hook's
// guard with secret (403, which the kubelet takes for the hook's end), ""
// when they are not.
func secretMiss(headers []podhooks.Header, secret string) string {
	secret = strings.TrimSpace(secret)
	if secret == "" {
		return ""
	}
	for _, h := range headers {
		if http.CanonicalHeaderKey(h.Name) == defaultHookHeader {
			if strings.TrimSpace(h.Value) == secret {
				return ""
			}
			return "its " + defaultHookHeader + " header is not " + EnvHookSecret + "'s value: the guard answers 403, which the kubelet takes for the hook's end, with no event"
		}
	}
	return "it has no " + defaultHookHeader + " header, which " + EnvHookSecret + " makes the hook require: the guard answers 403, which the kubelet takes for the hook's end, with no event"
}

// localIP reports whether ip is an address of one of this process's
// network interfaces.
func localIP(ip net.IP) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // not told: not said
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}
