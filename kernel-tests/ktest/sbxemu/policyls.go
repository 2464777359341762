package main

// `sbx policy ls` in each table the CLI has printed (mode.policyLs).

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// presetRules are the rules a default preset brings, listed beside the
// user's (they open no localhost port).
func presetRules(preset string) []rule {
	switch preset {
	case "balanced":
		return []rule{{Name: "default-ai-services", Decision: "allow", Resource: "api.anthropic.com:443,api.openai.com:443"}}
	case "allow-all":
		return []rule{{Name: "default-allow-all", Decision: "allow", Resource: "**"}}
	}
	return nil
}

func (e *emu) policyLs(w io.Writer, p policyFile, wide bool) error {
	rules := append(presetRules(p.Default), p.Rules...)
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	// row prints one rule, its resources one a row after the first
	// (the older tables) or comma-separated (the current --wide).
	row := func(cells func(r rule, res string) string, r rule, split bool) {
		res := strings.Split(r.Resource, ",")
		if !split {
			res = []string{r.Resource}
		}
		fmt.Fprintln(tw, cells(r, res[0]))
		for _, more := range res[1:] {
			c := strings.Split(cells(r, more), "\t")
			for i := range c[:len(c)-1] {
				c[i] = ""
			}
			fmt.Fprintln(tw, strings.Join(c, "\t"))
		}
	}
	switch {
	case e.mode.policyLs == "rules":
		fmt.Fprintln(tw, "NAME\tTYPE\tORIGIN\tDECISION\tSTATUS\tRESOURCES")
		for _, r := range rules {
			row(func(r rule, res string) string {
				origin := "local"
				if r.Sandbox != "" {
					origin = "sandbox:" + r.Sandbox
				}
				return fmt.Sprintf("%s\tnetwork\t%s\t%s\tactive\t%s", r.Name, origin, r.Decision, res)
			}, r, true)
		}
	case e.mode.policyLs == "provenance":
		fmt.Fprintln(tw, "PROVENANCE\tAPPLIES_TO\tPOLICY/RULE\tTYPE\tDECISION\tRESOURCES")
		for _, r := range rules {
			row(func(r rule, res string) string {
				return fmt.Sprintf("local\t%s\t%s\tnetwork\t%s\t%s", appliesTo(r), r.Name, r.Decision, res)
			}, r, true)
		}
	case wide:
		fmt.Fprintln(tw, "POLICY\tSOURCE\tAPPLIES TO\tRULE ID\tTYPE\tDECISION\tRESOURCES")
		for _, r := range rules {
			row(func(r rule, res string) string {
				return fmt.Sprintf("local-policy\tlocal\t%s\t%s\tnetwork\t%s\t%s", appliesTo(r), r.Name, r.Decision, res)
			}, r, false)
		}
	default:
		fmt.Fprintln(tw, "POLICY\tSOURCE\tAPPLIES TO\tSUMMARY")
		counts := map[string]map[string]int{"all": {}}
		scopes := []string{"all"}
		for _, r := range rules {
			a := appliesTo(r)
			if counts[a] == nil {
				counts[a] = map[string]int{}
				scopes = append(scopes, a)
			}
			counts[a][r.Decision] += len(strings.Split(r.Resource, ","))
		}
		for _, a := range scopes {
			fmt.Fprintf(tw, "local-policy\tlocal\t%s\tnetwork: %d allow, %d deny\n", a, counts[a]["allow"], counts[a]["deny"])
		}
	}
	return tw.Flush()
}

func appliesTo(r rule) string {
	if r.Sandbox != "" {
		return "sandbox:" + r.Sandbox
	}
	return "all"
}
