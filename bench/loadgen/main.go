// Command loadgen is the benchmark's traffic generator. It does the work that must not compete with the Python
// programs under test for the same interpreter: it creates the workload's pods as fast as the API server takes
// them, binds pods as the "ceiling" contender (a binder with no scheduling logic at all), and drives the
// admission webhook at fixed request rates. Standard library only, so it builds offline in seconds.
//
// It knows no key of the project and parses no map: the Python side (bench/plane.py) tells it where each object
// is created and which annotation names the node each pod is bound to.
//
//	loadgen create -in objects.txt -concurrency 64 -out creates.csv        (API flags: -server -ca -cert -key)
//	loadgen bind   -scheduler-name ceiling-binder -node-annotation gpu-bench/node -expect 5000 -workers 32
//	loadgen admit  -url https://127.0.0.1:8443/mutate -ca ca.pem -body review.json -rate 200 -duration 20s -out admit.csv
//
// Every CSV row is `seq,start_unix_ns,end_unix_ns,http_status`.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: loadgen create|bind|admit [flags]")
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var err error
	switch os.Args[1] {
	case "create":
		err = create(ctx, os.Args[2:])
	case "bind":
		err = bind(ctx, os.Args[2:])
	case "admit":
		err = admit(ctx, os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (want create, bind or admit)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

// ---- API access ---------------------------------------------------------------------------------------------

type apiFlags struct{ server, ca, cert, key string }

func (a *apiFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.server, "server", "", "API server URL")
	fs.StringVar(&a.ca, "ca", "", "CA certificate file of the API server")
	fs.StringVar(&a.cert, "cert", "", "client certificate file")
	fs.StringVar(&a.key, "key", "", "client key file")
}

// client speaks HTTP/2 to the API server over one TLS connection, as client-go does.
func (a *apiFlags) client() (*http.Client, error) {
	if a.server == "" || a.ca == "" || a.cert == "" || a.key == "" {
		return nil, errors.New("-server, -ca, -cert and -key are required")
	}
	return tlsClient(a.ca, a.cert, a.key)
}

func tlsClient(caFile, certFile, keyFile string) (*http.Client, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", caFile)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	transport := &http.Transport{
		TLSClientConfig:     cfg,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 512,
		IdleConnTimeout:     90 * time.Second,
	}
	return &http.Client{Transport: transport}, nil
}

type sample struct {
	seq        int
	start, end time.Time
	status     int
}

func writeSamples(path string, samples []sample) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "seq,start_unix_ns,end_unix_ns,http_status")
	for _, s := range samples {
		if s.start.IsZero() {
			continue
		}
		fmt.Fprintf(w, "%d,%d,%d,%d\n", s.seq, s.start.UnixNano(), s.end.UnixNano(), s.status)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// post sends one JSON body and returns the HTTP status (0 when no answer came) and the body of an error.
func post(ctx context.Context, c *http.Client, url string, body []byte) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return resp.StatusCode, strings.TrimSpace(string(data))
	}
	return resp.StatusCode, ""
}

// ---- create -------------------------------------------------------------------------------------------------

// create POSTs every object of its input, one per line: the API path of the collection the object is created in,
// one space, then the object's JSON. With -rate 0 from -concurrency workers as fast as the server answers,
// otherwise open-loop at -rate pods per second (each request leaves on time, whatever the others do).
func create(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("create", flag.ExitOnError)
	var api apiFlags
	api.register(fs)
	in := fs.String("in", "", "one object per line: its collection's API path, a space, its JSON")
	concurrency := fs.Int("concurrency", 64, "requests in flight (with -rate 0)")
	rate := fs.Float64("rate", 0, "pods per second, open loop (0: as fast as possible)")
	out := fs.String("out", "", "CSV of per-request timings")
	fs.Parse(args)
	c, err := api.client()
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(*in)
	if err != nil {
		return err
	}
	var bodies [][]byte
	var urls []string
	for n, line := range bytes.Split(raw, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		path, body, ok := bytes.Cut(line, []byte(" "))
		if !ok || !bytes.HasPrefix(path, []byte("/")) || !json.Valid(body) {
			return fmt.Errorf("%s line %d: want `<collection path> <object JSON>`", *in, n+1)
		}
		bodies = append(bodies, body)
		urls = append(urls, api.server+string(path))
	}
	samples := make([]sample, len(bodies))
	var failed atomic.Int64
	var firstErr atomic.Value
	do := func(i int) {
		start := time.Now()
		status, msg := post(ctx, c, urls[i], bodies[i])
		samples[i] = sample{i, start, time.Now(), status}
		if status != http.StatusCreated {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, fmt.Sprintf("object %d: HTTP %d %s", i, status, msg))
		}
	}
	var wg sync.WaitGroup
	if *rate > 0 {
		t0 := time.Now()
		for i := range bodies {
			due := t0.Add(time.Duration(float64(i) / *rate * float64(time.Second)))
			select {
			case <-ctx.Done():
			case <-time.After(time.Until(due)):
			}
			if ctx.Err() != nil {
				break
			}
			wg.Add(1)
			go func(i int) { defer wg.Done(); do(i) }(i)
		}
	} else {
		next := make(chan int)
		for w := 0; w < *concurrency; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					do(i)
				}
			}()
		}
		for i := range bodies {
			if ctx.Err() != nil {
				break
			}
			next <- i
		}
		close(next)
	}
	wg.Wait()
	if err := writeSamples(*out, samples); err != nil {
		return err
	}
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("%d of %d creates failed; first: %v", n, len(bodies), firstErr.Load())
	}
	return ctx.Err()
}

// ---- bind (the ceiling) -------------------------------------------------------------------------------------

// objectMeta is what the binder reads of a pod: who it is, and the annotation that names its node.
type objectMeta struct {
	Metadata struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		UID         string            `json:"uid"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
}

type watchEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

type podList struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Items []json.RawMessage `json:"items"`
}

// bind lists and watches the unbound pods of -scheduler-name and binds each to the node its -node-annotation
// names, from -workers goroutines, until -expect pods are bound. The benchmark works the node out when it makes
// the pod (it is the node of the pod's map entry), so the binder only reads one annotation: the least a binder
// can do to know where a pod goes.
func bind(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bind", flag.ExitOnError)
	var api apiFlags
	api.register(fs)
	name := fs.String("scheduler-name", "ceiling-binder", "spec.schedulerName of the pods to bind")
	nodeAnnotation := fs.String("node-annotation", "", "pod annotation whose value is the node to bind the pod to")
	expect := fs.Int("expect", 0, "exit after binding this many pods (0: run until signalled)")
	workers := fs.Int("workers", 32, "binding requests in flight")
	fs.Parse(args)
	if *nodeAnnotation == "" {
		return errors.New("-node-annotation is required")
	}
	c, err := api.client()
	if err != nil {
		return err
	}
	selector := url.QueryEscape("spec.schedulerName=" + *name + ",spec.nodeName=")
	queue := make(chan objectMeta, 65536)
	var bound atomic.Int64
	done := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for meta := range queue {
				m := meta.Metadata
				node := m.Annotations[*nodeAnnotation]
				if node == "" {
					fmt.Fprintf(os.Stderr, "loadgen bind: pod %s/%s has no annotation %s\n", m.Namespace, m.Name, *nodeAnnotation)
					continue
				}
				body, _ := json.Marshal(map[string]any{
					"apiVersion": "v1", "kind": "Binding",
					"metadata": map[string]string{"name": m.Name, "namespace": m.Namespace, "uid": m.UID},
					"target":   map[string]string{"apiVersion": "v1", "kind": "Node", "name": node},
				})
				url := fmt.Sprintf("%s/api/v1/namespaces/%s/pods/%s/binding", api.server, m.Namespace, m.Name)
				status, msg := post(ctx, c, url, body)
				if status != http.StatusCreated {
					if ctx.Err() == nil {
						fmt.Fprintf(os.Stderr, "loadgen bind: %s/%s: HTTP %d %s\n", m.Namespace, m.Name, status, msg)
					}
					continue
				}
				if n := bound.Add(1); *expect > 0 && n >= int64(*expect) {
					once.Do(func() { close(done) })
				}
			}
		}()
	}
	watchErr := make(chan error, 1)
	watchCtx, stopWatch := context.WithCancel(ctx)
	go func() { watchErr <- listWatch(watchCtx, c, api.server+"/api/v1/pods?fieldSelector="+selector, queue) }()
	select {
	case <-done:
	case <-ctx.Done():
	case err = <-watchErr:
	}
	stopWatch()
	close(queue)
	wg.Wait()
	fmt.Printf("bound %d pods\n", bound.Load())
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// listWatch sends every pod the list and then the watch report as ADDED to `queue`, re-watching from the last
// resourceVersion when the server ends a watch.
func listWatch(ctx context.Context, c *http.Client, base string, queue chan<- objectMeta) error {
	resp, err := get(ctx, c, base)
	if err != nil {
		return err
	}
	var list podList
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil {
		return err
	}
	for _, item := range list.Items {
		var meta objectMeta
		if json.Unmarshal(item, &meta) == nil {
			queue <- meta
		}
	}
	rv := list.Metadata.ResourceVersion
	fmt.Fprintf(os.Stderr, "loadgen bind: listed %d pods, watching from resourceVersion %s\n", len(list.Items), rv)
	for ctx.Err() == nil {
		resp, err := get(ctx, c, base+"&watch=1&allowWatchBookmarks=true&resourceVersion="+rv)
		if err != nil {
			return err
		}
		dec := json.NewDecoder(resp.Body)
		for {
			var ev watchEvent
			if err := dec.Decode(&ev); err != nil {
				break
			}
			var meta objectMeta
			var rvOnly struct {
				Metadata struct {
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
			}
			if ev.Type == "ERROR" {
				resp.Body.Close()
				return fmt.Errorf("watch error: %s", ev.Object)
			}
			if json.Unmarshal(ev.Object, &rvOnly) == nil && rvOnly.Metadata.ResourceVersion != "" {
				rv = rvOnly.Metadata.ResourceVersion
			}
			if ev.Type == "ADDED" && json.Unmarshal(ev.Object, &meta) == nil {
				queue <- meta
			}
		}
		resp.Body.Close()
	}
	return ctx.Err()
}

func get(ctx context.Context, c *http.Client, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: HTTP %d %s", url, resp.StatusCode, data)
	}
	return resp, nil
}

// ---- admit --------------------------------------------------------------------------------------------------

// admit sends the same AdmissionReview to the webhook open-loop at -rate requests per second for -duration.
func admit(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("admit", flag.ExitOnError)
	target := fs.String("url", "", "webhook URL (https://host:port/mutate)")
	ca := fs.String("ca", "", "CA certificate file of the webhook")
	bodyFile := fs.String("body", "", "AdmissionReview JSON file")
	rate := fs.Float64("rate", 50, "requests per second")
	duration := fs.Duration("duration", 20*time.Second, "how long to send")
	out := fs.String("out", "", "CSV of per-request timings")
	fs.Parse(args)
	if *rate <= 0 {
		return errors.New("-rate must be positive")
	}
	c, err := tlsClient(*ca, "", "")
	if err != nil {
		return err
	}
	body, err := os.ReadFile(*bodyFile)
	if err != nil {
		return err
	}
	total := int(*rate * duration.Seconds())
	samples := make([]sample, total)
	var failed atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := 0; i < total && ctx.Err() == nil; i++ {
		due := t0.Add(time.Duration(float64(i) / *rate * float64(time.Second)))
		time.Sleep(time.Until(due))
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			start := time.Now()
			status, msg := post(ctx, c, *target, body)
			samples[i] = sample{i, start, time.Now(), status}
			if status != http.StatusOK {
				if failed.Add(1) == 1 {
					fmt.Fprintf(os.Stderr, "loadgen admit: HTTP %d %s\n", status, msg)
				}
			}
		}(i)
	}
	wg.Wait()
	if err := writeSamples(*out, samples); err != nil {
		return err
	}
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("%d of %d admission requests failed", n, total)
	}
	fmt.Printf("sent %d requests in %s\n", total, time.Since(t0).Round(time.Millisecond))
	return ctx.Err()
}
