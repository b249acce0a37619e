package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cairnmq/cairn/client"
)

func main() {
	ctx := context.Background()
	c, err := client.Dial(ctx, strings.Split(os.Args[1], ","), client.Options{})
	if err != nil {
		panic(err)
	}
	s, err := c.Session(client.AutoAck)
	if err != nil {
		panic(err)
	}
	p, err := s.Producer(os.Args[2])
	if err != nil {
		panic(err)
	}
	d, _ := time.ParseDuration(os.Args[3])
	end := time.Now().Add(d)
	body := make([]byte, 1024)
	n := 0
	for time.Now().Before(end) {
		t := time.Now()
		_, err := p.Send(ctx, &client.Message{Body: body})
		if el := time.Since(t); el > 100*time.Millisecond || err != nil {
			fmt.Printf("%s send took %v err %v\n", t.Format("15:04:05.000"), el.Round(time.Millisecond), err)
		}
		n++
	}
	fmt.Println("sent", n)
}
