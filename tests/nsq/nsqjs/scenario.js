// nsqjs against natserver's NSQ front-end: publish with Writer, consume with Reader
// (deflate or snappy or plain, per argv), REQ once to see attempts go up. Prints one JSON
// line with what it saw; exits non-zero on any error.
const nsq = require('nsqjs')

const [port, mode] = [parseInt(process.argv[2], 10), process.argv[3] || 'plain']
const options = { deflate: mode === 'deflate', snappy: mode === 'snappy', tls: mode === 'tls', tlsVerification: false }
const topic = 'nsqjs_' + mode
const seen = []
const fail = (err) => { console.error(String(err)); process.exit(1) }
setTimeout(() => fail('timeout'), 15000)

const writer = new nsq.Writer('127.0.0.1', port, options)
writer.on('error', fail)
writer.on('ready', () => {
  writer.publish(topic, ['one', 'two'], (err) => {
    if (err) return fail(err)
    const reader = new nsq.Reader(topic, 'c', { nsqdTCPAddresses: [`127.0.0.1:${port}`], maxInFlight: 5, ...options })
    reader.on('error', fail)
    reader.on('message', (msg) => {
      seen.push([msg.body.toString(), msg.attempts])
      if (msg.body.toString() === 'two' && msg.attempts === 1) {
        msg.requeue(0, false)
        return
      }
      msg.finish()
      if (seen.filter(([b, a]) => b === 'one' || a > 1).length === 2) {
        console.log(JSON.stringify({ seen }))
        reader.close()
        writer.close()
        process.exit(0)
      }
    })
    reader.connect()
  })
})
writer.connect()
