// The tests' private S3 store: @20minutes/s3rver (installed by scripts/install-deps.sh,
// TBMFS_S3RVER names its directory), which checks SigV4 signatures, wrapped to behave as a
// private bucket on AWS does: unsigned requests get 403 AccessDenied, a key given with a session
// token is refused without that token signed (400 InvalidToken), and a suffix range
// ("bytes=-N", which s3rver reads as bytes 0-N) is answered as S3 answers it.
//
// Usage: node s3server.js DIRECTORY. Prints "port N" once listening on 127.0.0.1, then obeys
// one JSON command per line of stdin, answering each with one line:
//   {"key": AK, "secret": SK, "token": T}  accept a key pair (token optional)
//   {"revoke": AK}                          refuse it from now on
//   {"count": true}                          the number of requests served so far
// The server's own key pair (S3RVER) is revoked at start.
'use strict'

const path = require('node:path')
const readline = require('node:readline')
const { AsyncLocalStorage } = require('node:async_hooks')

const base = path.join(
  process.env.TBMFS_S3RVER || '/opt/tbmfs-test/s3rver',
  'node_modules',
  '@20minutes',
  's3rver',
  'lib'
)
const S3rver = require(path.join(base, 's3rver.js'))
const S3Error = require(path.join(base, 'models', 'error.js'))
const AWSAccount = require(path.join(base, 'models', 'account.js'))

const account = AWSAccount.DUMMY_ACCOUNT
const tokens = new Map()
const suffix = new AsyncLocalStorage()
let requests = 0

account.revokeAccessKey('S3RVER')

const server = new S3rver({
  address: '127.0.0.1',
  port: 0,
  silent: true,
  directory: process.argv[2],
  vhostBuckets: false,
})

function accessKeyOf(ctx) {
  const auth = ctx.get('authorization')
  const m = /Credential=([^/]+)\//.exec(auth) || /^([^/]+)\//.exec(ctx.query['X-Amz-Credential'] || '')
  return m ? m[1] : null
}

async function privateBucket(ctx, next) {
  requests++
  const signed = 'authorization' in ctx.headers || 'X-Amz-Algorithm' in ctx.query
  if (!signed) {
    throw new S3Error('AccessDenied', 'Access Denied')
  }
  const ak = accessKeyOf(ctx)
  const token = ak && tokens.get(ak)
  if (token) {
    const signedHeaders = /SignedHeaders=([^,]+)/.exec(ctx.get('authorization'))
    const list = signedHeaders ? signedHeaders[1].split(';') : []
    const given = ctx.get('x-amz-security-token') || ctx.query['X-Amz-Security-Token']
    if (given !== token || (signedHeaders && !list.includes('x-amz-security-token'))) {
      throw new S3Error('InvalidToken', 'The provided token is malformed or otherwise invalid.')
    }
  }
  const m = /^bytes=-(\d+)$/.exec(ctx.get('range'))
  return suffix.run(m ? Number(m[1]) : null, next)
}

const getObject = server.store.getObject.bind(server.store)
server.store.getObject = async (bucket, key, options) => {
  const n = suffix.getStore()
  if (n !== null && n !== undefined) {
    const meta = await server.store.getMetadata(bucket, key).catch(() => null)
    if (meta) {
      const size = Number(meta['content-length'])
      options = { start: Math.max(0, size - n), end: size - 1 }
    }
  }
  return getObject(bucket, key, options)
}

// before the routes (the last middleware), so before their signature check
server.middleware.splice(server.middleware.length - 1, 0, privateBucket)

server.run().then((addr) => {
  process.stdout.write(`port ${addr.port}\n`)
  const rl = readline.createInterface({ input: process.stdin })
  rl.on('line', (line) => {
    const cmd = JSON.parse(line)
    if (cmd.key) {
      account.createKeyPair(cmd.key, cmd.secret)
      if (cmd.token) tokens.set(cmd.key, cmd.token)
      else tokens.delete(cmd.key)
      process.stdout.write('ok\n')
    } else if (cmd.revoke) {
      account.revokeAccessKey(cmd.revoke)
      tokens.delete(cmd.revoke)
      process.stdout.write('ok\n')
    } else if (cmd.count) {
      process.stdout.write(`${requests}\n`)
    }
  })
  rl.on('close', () => process.exit(0))
})
