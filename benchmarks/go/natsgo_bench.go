// natsgo_bench drives a NATS server with nats.go, a client nobody on this
// project wrote, and prints one JSON object with what it measured.
//
//	natsgo_bench -url nats://127.0.0.1:4222 -mode reqrep -requesters 1 -size 16 -duration 2s
//	natsgo_bench -url ... -mode pubsub -subjects 64 -min 16 -max 512 -subs 1 -duration 2s
//
// reqrep: a responder connection subscribes to bench.req and answers every
// message with m.Respond(); each requester (its own connection, as separate
// services would be) calls nc.Request() in a loop, so nats.go's muxed
// _INBOX.<id>.* subscription and PUB-with-reply path are what is measured.
//
// pubsub: one publisher connection, -subs subscriber connections on "bench.>"
// with Subscribe callbacks; the subject (of -subjects) and the size (-min to
// -max) change every message. The publisher pauses while a subscriber trails
// by more than -lag messages, so nobody becomes a slow consumer.
//
// JetStream (a file stream, as nats.go's users make one; "MARK" on stdout when
// the timed part starts, so the caller can read the server's CPU there):
//
//	-mode jspub   js.PublishAsync, at most -window acks pending, on -subjects
//	              subjects of -size bytes: acked publishes/s, every ack checked;
//	-mode jspull  -stored messages published first, then a durable pull
//	              consumer's Fetch(-batch) and m.Ack() of each: messages/s;
//	-mode kvput   kv.Put of -keys keys in turn (a request each, as a user's
//	              code waits for it): puts/s;
//	-mode kvget   kv.Get of those keys (a direct get on 2.15.1 buckets): gets/s.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsgo_bench:", err)
		os.Exit(1)
	}
}

func connect(url string) *nats.Conn {
	nc, err := nats.Connect(url, nats.MaxReconnects(0))
	must(err)
	return nc
}

func reqrep(url string, requesters, size, warmup int, duration time.Duration) map[string]any {
	rsp := connect(url)
	defer rsp.Close()
	var answered int64
	_, err := rsp.Subscribe("bench.req", func(m *nats.Msg) {
		atomic.AddInt64(&answered, 1)
		m.Respond(m.Data)
	})
	must(err)
	must(rsp.Flush())

	payload := make([]byte, size)
	for i := range payload {
		payload[i] = 'x'
	}
	lats := make([][]time.Duration, requesters)
	errs := make([]string, requesters)
	var wg sync.WaitGroup
	var start sync.WaitGroup
	start.Add(1)
	for r := 0; r < requesters; r++ {
		nc := connect(url)
		defer nc.Close()
		wg.Add(1)
		go func(r int, nc *nats.Conn) {
			defer wg.Done()
			start.Wait()
			end := time.Now().Add(duration)
			for i := 0; ; i++ {
				a := time.Now()
				m, err := nc.Request("bench.req", payload, 5*time.Second)
				d := time.Since(a)
				if err != nil {
					errs[r] = err.Error()
					return
				}
				if len(m.Data) != size {
					errs[r] = "reply of the wrong size"
					return
				}
				if i >= warmup {
					lats[r] = append(lats[r], d)
					if time.Now().After(end) {
						return
					}
				}
			}
		}(r, nc)
	}
	t0 := time.Now()
	start.Done()
	wg.Wait()
	elapsed := time.Since(t0)
	var all []time.Duration
	var problems []string
	for r := range lats {
		all = append(all, lats[r]...)
		if errs[r] != "" {
			problems = append(problems, errs[r])
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	q := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[int(p*float64(len(all)-1))].Nanoseconds()) / 1e3
	}
	return map[string]any{
		"requests": len(all), "warmup": warmup * requesters, "answered": atomic.LoadInt64(&answered),
		"p50_us": q(0.50), "p90_us": q(0.90), "p99_us": q(0.99),
		"rate": float64(len(all)) / elapsed.Seconds(), "errors": problems,
	}
}

func pubsub(url string, subs, subjects, minSize, maxSize, lag int, duration time.Duration) map[string]any {
	var names []string
	for i := 0; i < subjects; i++ {
		names = append(names, fmt.Sprintf("bench.s%d", i))
	}
	recv := make([]int64, subs)
	var last atomic.Value
	last.Store(time.Time{})
	for s := 0; s < subs; s++ {
		nc := connect(url)
		defer nc.Close()
		s := s
		sub, err := nc.Subscribe("bench.>", func(m *nats.Msg) {
			atomic.AddInt64(&recv[s], 1)
			last.Store(time.Now())
		})
		must(err)
		must(sub.SetPendingLimits(-1, -1))
		must(nc.Flush())
	}
	pub := connect(url)
	defer pub.Close()
	rng := rand.New(rand.NewSource(17)) // the same messages for every server and round
	buf := make([]byte, maxSize)
	for i := range buf {
		buf[i] = 'x'
	}
	minRecv := func() int64 {
		m := atomic.LoadInt64(&recv[0])
		for s := range recv {
			if v := atomic.LoadInt64(&recv[s]); v < m {
				m = v
			}
		}
		return m
	}
	var sent int64
	t0 := time.Now()
	end := t0.Add(duration)
	for time.Now().Before(end) {
		for i := 0; i < 1000; i++ {
			size := minSize + rng.Intn(maxSize-minSize+1)
			must(pub.Publish(names[rng.Intn(len(names))], buf[:size]))
		}
		sent += 1000
		for sent-minRecv() > int64(lag) {
			time.Sleep(100 * time.Microsecond)
		}
	}
	must(pub.Flush())
	drained := time.Now().Add(10 * time.Second)
	for minRecv() < sent && time.Now().Before(drained) {
		time.Sleep(time.Millisecond)
	}
	var total int64
	for s := range recv {
		total += atomic.LoadInt64(&recv[s])
	}
	elapsed := last.Load().(time.Time).Sub(t0)
	return map[string]any{
		"published": sent, "received": recv, "deliv_rate": float64(total) / elapsed.Seconds(),
		"complete": minRecv() == sent,
	}
}

func main() {
	url := flag.String("url", nats.DefaultURL, "server URL")
	mode := flag.String("mode", "reqrep", "reqrep or pubsub")
	duration := flag.Duration("duration", 2*time.Second, "measured load per run")
	requesters := flag.Int("requesters", 1, "reqrep: requester connections")
	size := flag.Int("size", 16, "reqrep: payload bytes")
	warmup := flag.Int("warmup", 200, "reqrep: requests per requester before measuring")
	subs := flag.Int("subs", 1, "pubsub: subscriber connections")
	subjects := flag.Int("subjects", 1, "pubsub: subjects drawn from")
	minSize := flag.Int("min", 16, "pubsub: smallest payload")
	maxSize := flag.Int("max", 512, "pubsub: largest payload")
	lag := flag.Int("lag", 20000, "pubsub: messages a subscriber may trail before the publisher waits")
	window := flag.Int("window", 512, "jspub: acks pending at most")
	stored := flag.Int("stored", 200000, "jspull: messages stored before consuming")
	batch := flag.Int("batch", 256, "jspull: messages a Fetch")
	keys := flag.Int("keys", 100, "kvput, kvget: keys")
	flag.Parse()
	var out map[string]any
	switch *mode {
	case "reqrep":
		out = reqrep(*url, *requesters, *size, *warmup, *duration)
	case "pubsub":
		out = pubsub(*url, *subs, *subjects, *minSize, *maxSize, *lag, *duration)
	case "jspub":
		out = jsPub(*url, *subjects, *size, *window, *duration)
	case "jspull":
		out = jsPull(*url, *size, *stored, *batch, *duration)
	case "kvput", "kvget":
		out = kv(*url, *mode, *keys, *size, *duration)
	default:
		must(fmt.Errorf("unknown -mode %q", *mode))
	}
	out["client"] = "nats.go " + nats.Version
	must(json.NewEncoder(os.Stdout).Encode(out))
}

// jsStream makes the stream BENCH on bench.> in a file store, and the JetStream
// context with at most window acks pending.
func jsStream(nc *nats.Conn, window int) nats.JetStreamContext {
	js, err := nc.JetStream(nats.PublishAsyncMaxPending(window))
	must(err)
	_, err = js.AddStream(&nats.StreamConfig{Name: "BENCH", Subjects: []string{"bench.>"}, Storage: nats.FileStorage})
	must(err)
	return js
}

func waitAcks(js nats.JetStreamContext) {
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(60 * time.Second):
		must(fmt.Errorf("acks pending for over a minute"))
	}
}

func mark() {
	fmt.Println("MARK")
}

func jsPub(url string, subjects, size, window int, duration time.Duration) map[string]any {
	nc := connect(url)
	defer nc.Close()
	js := jsStream(nc, window)
	names := make([]string, subjects)
	for i := range names {
		names[i] = fmt.Sprintf("bench.s%d", i)
	}
	payload := make([]byte, size)
	var acked, failed int64
	futures := make(chan nats.PubAckFuture, window)
	done := make(chan struct{})
	go func() { // every ack checked, in order
		var want uint64 = 1
		for f := range futures {
			select {
			case ack := <-f.Ok():
				if ack.Sequence != want {
					atomic.AddInt64(&failed, 1)
				}
				want = ack.Sequence + 1
				atomic.AddInt64(&acked, 1)
			case <-f.Err():
				atomic.AddInt64(&failed, 1)
			}
		}
		close(done)
	}()
	mark()
	t0 := time.Now()
	end := t0.Add(duration)
	for i := 0; time.Now().Before(end); i++ {
		f, err := js.PublishAsync(names[i%subjects], payload)
		must(err)
		futures <- f
	}
	close(futures)
	<-done
	elapsed := time.Since(t0)
	info, err := js.StreamInfo("BENCH")
	must(err)
	return map[string]any{
		"acked": acked, "rate": float64(acked) / elapsed.Seconds(),
		"ok": failed == 0 && info.State.Msgs == uint64(acked),
	}
}

func jsPull(url string, size, stored, batch int, duration time.Duration) map[string]any {
	nc := connect(url)
	defer nc.Close()
	js := jsStream(nc, 512)
	payload := make([]byte, size)
	for i := 0; i < stored; i++ {
		if i%512 == 0 { // a window at a time: a slow server stalls nothing
			waitAcks(js)
		}
		_, err := js.PublishAsync("bench.data", payload)
		must(err)
	}
	waitAcks(js)
	sub, err := js.PullSubscribe("bench.data", "PULL", nats.AckExplicit())
	must(err)
	var got int
	var want uint64 = 1
	ok := true
	mark()
	t0 := time.Now()
	end := t0.Add(duration)
	for time.Now().Before(end) && got < stored {
		msgs, err := sub.Fetch(batch, nats.MaxWait(5*time.Second))
		must(err)
		for _, m := range msgs {
			meta, err := m.Metadata()
			must(err)
			if meta.Sequence.Stream != want {
				ok = false
			}
			want++
			must(m.Ack())
		}
		got += len(msgs)
	}
	elapsed := time.Since(t0)
	must(nc.Flush())
	return map[string]any{"consumed": got, "rate": float64(got) / elapsed.Seconds(), "ok": ok && got > 0}
}

func kv(url, mode string, keys, size int, duration time.Duration) map[string]any {
	nc := connect(url)
	defer nc.Close()
	js, err := nc.JetStream()
	must(err)
	bucket, err := js.CreateKeyValue(&nats.KeyValueConfig{Bucket: "B", Storage: nats.FileStorage})
	must(err)
	value := make([]byte, size)
	names := make([]string, keys)
	revisions := make([]uint64, keys)
	for i := range names {
		names[i] = fmt.Sprintf("k%d", i)
		if mode == "kvget" {
			revisions[i], err = bucket.Put(names[i], value)
			must(err)
		}
	}
	ok := true
	var n int
	mark()
	t0 := time.Now()
	end := t0.Add(duration)
	for ; time.Now().Before(end); n++ {
		k := n % keys
		if mode == "kvput" {
			rev, err := bucket.Put(names[k], value)
			must(err)
			ok = ok && rev > revisions[k]
			revisions[k] = rev
		} else {
			e, err := bucket.Get(names[k])
			must(err)
			ok = ok && e.Revision() == revisions[k] && len(e.Value()) == size
		}
	}
	elapsed := time.Since(t0)
	return map[string]any{"ops": n, "rate": float64(n) / elapsed.Seconds(), "ok": ok && n > 0}
}
