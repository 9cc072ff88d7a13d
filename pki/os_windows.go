package pki

const isWindows = true
