// Package ublk is drainkit's block-device teardown step for ublk servers.
package ublk
